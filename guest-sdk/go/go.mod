module github.com/sluicehq/sluice/guest-sdk/go

go 1.26
