module github.com/open-bot/computer/apps/worker

go 1.26

require (
	github.com/coder/websocket v1.8.15
	github.com/hashicorp/yamux v0.1.2
	github.com/open-bot/computer/pkg/shared v0.0.0
	github.com/rs/zerolog v1.35.1
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.29.0 // indirect
)

replace github.com/open-bot/computer/pkg/shared => ../../pkg/shared
