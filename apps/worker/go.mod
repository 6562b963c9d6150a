module github.com/open-bot/computer/apps/worker

go 1.26

require github.com/open-bot/computer/pkg/shared v0.0.0

require (
	github.com/coder/websocket v1.8.15 // indirect
	github.com/hashicorp/yamux v0.1.2 // indirect
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/rs/zerolog v1.35.1 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	golang.org/x/sys v0.29.0 // indirect
)

replace github.com/open-bot/computer/pkg/shared => ../../pkg/shared
