module github.com/warden-sandbox/warden/sdk/go

go 1.19
