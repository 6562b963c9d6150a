package egress

import (
	"fmt"
	"strings"

	"github.com/rs/zerolog"
)

// logWriter turns the libraries' log lines into zerolog debug events: their
// messages are per-connection noise (a client hung up), not operator news.
type logWriter struct{ log zerolog.Logger }

func (w logWriter) Write(b []byte) (int, error) {
	w.log.Debug().Msg(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// yamuxLogger is yamux's Logger interface on top of zerolog.
type yamuxLogger struct{ log zerolog.Logger }

func (l yamuxLogger) Print(v ...any)                 { l.log.Debug().Msg(fmt.Sprint(v...)) }
func (l yamuxLogger) Printf(format string, v ...any) { l.log.Debug().Msgf(format, v...) }
func (l yamuxLogger) Println(v ...any)               { l.log.Debug().Msg(strings.TrimSpace(fmt.Sprintln(v...))) }
