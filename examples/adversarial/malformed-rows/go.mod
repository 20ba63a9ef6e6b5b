module github.com/sluicehq/sluice/examples/adversarial/malformed-rows

go 1.26
