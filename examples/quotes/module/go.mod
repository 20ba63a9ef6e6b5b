module github.com/sluicehq/sluice/examples/quotes/module

go 1.26

require github.com/sluicehq/sluice/guest-sdk/go v0.0.0

replace github.com/sluicehq/sluice/guest-sdk/go => ../../../guest-sdk/go
