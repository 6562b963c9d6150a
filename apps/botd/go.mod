module github.com/open-bot/computer/apps/botd

go 1.26.0

require github.com/open-bot/computer/pkg/shared v0.0.0

require (
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/mattn/go-colorable v0.1.15 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/net v0.62.0 // indirect
)

replace github.com/open-bot/computer/pkg/shared => ../../pkg/shared

require (
	github.com/BurntSushi/xgb v0.0.0-20200324125942-20f126ea2843
	github.com/armon/go-socks5 v0.0.0-20160902184237-e75332964ef5
	github.com/chromedp/cdproto v0.160.2
	github.com/cilium/ebpf v0.22.0
	github.com/coder/websocket v1.8.15
	github.com/creack/pty v1.1.24
	github.com/godbus/dbus/v5 v5.2.4
	github.com/hashicorp/yamux v0.1.2
	github.com/open-bot/computer/apps/worker v0.0.0
	github.com/rs/zerolog v1.35.1
	github.com/stretchr/testify v1.12.1
	golang.org/x/sys v0.50.0
)

replace github.com/open-bot/computer/apps/worker => ../worker
