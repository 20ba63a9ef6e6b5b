module github.com/sluicehq/sluice/guest-sdk/conformance/go

go 1.26

require github.com/sluicehq/sluice/guest-sdk/go v0.0.0

replace github.com/sluicehq/sluice/guest-sdk/go => ../../go
