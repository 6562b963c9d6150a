package mcp

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/open-bot/computer/apps/worker/internal/capability"
)

// BridgeOptions is where `worker mcp --stdio` connects and as whom.
type BridgeOptions struct {
	// Endpoint is the worker's /mcp URL.
	Endpoint string
	// Token, Capability and Bot are sent on every request; never logged.
	Token, Capability, Bot string
	// HTTPClient, when set, carries the requests (nil: a default client).
	HTTPClient *http.Client
}

// headers adds the session's credentials to every request.
type headers struct {
	base                   http.RoundTripper
	token, capability, bot string
}

func (h headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+h.token)
	r.Header.Set(capability.Header, h.capability)
	r.Header.Set(BotHeader, h.bot)
	return h.base.RoundTrip(r)
}

// Bridge relays JSON-RPC messages between a local MCP client on in/out
// (newline-delimited, the stdio transport) and the worker's /mcp, until in
// ends or ctx is done. A request the worker refuses is answered to the
// client as a JSON-RPC error, so the client sees why.
func Bridge(ctx context.Context, in io.ReadCloser, out io.WriteCloser, o BridgeOptions) error {
	base := http.DefaultTransport
	if o.HTTPClient != nil && o.HTTPClient.Transport != nil {
		base = o.HTTPClient.Transport
	}
	hc := &http.Client{Transport: headers{base: base, token: o.Token, capability: o.Capability, bot: o.Bot}}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	local, err := (&gomcp.IOTransport{Reader: in, Writer: out}).Connect(ctx)
	if err != nil {
		return err
	}
	defer local.Close()
	remote, err := (&gomcp.StreamableClientTransport{Endpoint: o.Endpoint, HTTPClient: hc, DisableStandaloneSSE: true}).Connect(ctx)
	if err != nil {
		return err
	}
	defer remote.Close()
	errc := make(chan error, 2)
	go func() { // worker → client
		for {
			msg, err := remote.Read(ctx)
			if err != nil {
				errc <- err
				return
			}
			if err := local.Write(ctx, msg); err != nil {
				errc <- err
				return
			}
		}
	}()
	go func() { // client → worker
		for {
			msg, err := local.Read(ctx)
			if err != nil {
				errc <- err
				return
			}
			if err := remote.Write(ctx, msg); err != nil {
				req, ok := msg.(*jsonrpc.Request)
				if !ok || !req.IsCall() {
					continue
				}
				var werr *jsonrpc.Error
				if !errors.As(err, &werr) {
					werr = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the worker could not be reached: " + err.Error()}
				}
				if err := local.Write(ctx, &jsonrpc.Response{ID: req.ID, Error: werr}); err != nil {
					errc <- err
					return
				}
			}
		}
	}()
	err = <-errc
	if errors.Is(err, io.EOF) || ctx.Err() != nil {
		return nil
	}
	return err
}
