module github.com/sluicehq/sluice/examples/sensor-batch-json

go 1.26

require (
	github.com/sluicehq/sluice/examples/sensor-batch v0.0.0
	github.com/sluicehq/sluice/guest-sdk/go v0.0.0
)

replace (
	github.com/sluicehq/sluice/examples/sensor-batch => ../sensor-batch
	github.com/sluicehq/sluice/guest-sdk/go => ../../guest-sdk/go
)
