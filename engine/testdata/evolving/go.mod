module github.com/sluicehq/sluice/engine/testdata/evolving

go 1.26

require github.com/sluicehq/sluice/guest-sdk/go v0.0.0

replace github.com/sluicehq/sluice/guest-sdk/go => ../../../guest-sdk/go
