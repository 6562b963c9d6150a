package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/open-bot/computer/pkg/shared/egresspolicy"
)

// benchCurlSize is the transfer of BenchmarkEgressCurl: EGRESS_BENCH_BYTES
// (bytes, or with a K/M/G suffix in binary units), default 256 MiB.
func benchCurlSize(b *testing.B) int64 {
	s := strings.TrimSpace(os.Getenv("EGRESS_BENCH_BYTES"))
	if s == "" {
		return 256 << 20
	}
	mult := int64(1)
	switch strings.ToUpper(s[len(s)-1:]) {
	case "K":
		mult = 1 << 10
	case "M":
		mult = 1 << 20
	case "G":
		mult = 1 << 30
	}
	if mult > 1 {
		s = s[:len(s)-1]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		b.Fatalf("EGRESS_BENCH_BYTES=%q: want a positive size", os.Getenv("EGRESS_BENCH_BYTES"))
	}
	return n * mult
}

// TestMain lets the benchmark run its web server as a process of its own
// (this test binary again, with EGRESS_BENCH_SERVE set to the file): the
// proxy then has this process to itself, as botd has its own, and this
// process's CPU time is the proxy's.
func TestMain(m *testing.M) {
	if path := os.Getenv("EGRESS_BENCH_SERVE"); path != "" {
		serveFile(path)
		return
	}
	os.Exit(m.Run())
}

// serveFile serves the file at path on GET (sendfile, as a static web
// server would) and, on PUT, reads the body in 256 KiB reads and answers
// how many bytes arrived. It prints its address and serves until its
// standard input closes.
func serveFile(path string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			buf := make([]byte, 256*1024)
			var n int64
			for {
				m, err := r.Body.Read(buf)
				n += int64(m)
				if err != nil {
					break
				}
			}
			_, _ = fmt.Fprint(w, n)
			return
		}
		http.ServeFile(w, r, path)
	})}
	go func() { _ = srv.Serve(ln) }()
	fmt.Println(ln.Addr().String())
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = srv.Close()
}

// fileServer starts serveFile in a process of its own and returns its
// address.
func fileServer(b *testing.B, path string) string {
	b.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "EGRESS_BENCH_SERVE="+path)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("file server: %v", err)
	}
	return strings.TrimSpace(line)
}

// socatRelay runs `socat -b 262144` relaying a port of the benchmark's own
// range (27000-27099) to target, and returns the address it listens on and
// its process id.
func socatRelay(b *testing.B, target string) (string, int) {
	b.Helper()
	for port := 27000; port < 27100; port++ {
		addr := "127.0.0.1:" + strconv.Itoa(port)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		_ = ln.Close()
		cmd := exec.Command("socat", "-b", "262144",
			"TCP-LISTEN:"+strconv.Itoa(port)+",bind=127.0.0.1,reuseaddr,fork", "TCP:"+target)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		// socat listens a moment after it starts.
		deadline := time.Now().Add(5 * time.Second)
		for {
			c, err := net.Dial("tcp", addr)
			if err == nil {
				_ = c.Close()
				return addr, cmd.Process.Pid
			}
			if time.Now().After(deadline) {
				b.Fatalf("socat never listened on %s: %v", addr, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	b.Fatal("no free port in 27000-27099 for socat")
	return "", 0
}

// socatCPU is the CPU time socat has used, its forked children included
// once it has reaped them (it forks one per connection): /proc/PID/stat's
// utime, stime, cutime and cstime. It first waits (up to a second) for the
// last connection's child to be gone.
func socatCPU(b *testing.B, pid int) time.Duration {
	b.Helper()
	self := strconv.Itoa(pid)
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		kids, err := os.ReadFile("/proc/" + self + "/task/" + self + "/children")
		if err != nil || strings.TrimSpace(string(kids)) == "" {
			break
		}
	}
	stat, err := os.ReadFile("/proc/" + self + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command's closing parenthesis: state is field 3,
	// utime..cstime are 14..17.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	var ticks int64
	for _, i := range []int{14, 15, 16, 17} {
		v, err := strconv.ParseInt(f[i-3], 10, 64)
		if err != nil {
			b.Fatalf("/proc/%d/stat: %v", pid, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}

// curlRun runs one curl transfer (a GET of the file to /dev/null, or a PUT
// of it) with the extra arguments, checks that every byte arrived, and
// returns how long the curl process took.
func curlRun(b *testing.B, url string, up bool, file string, size int64, extra ...string) time.Duration {
	b.Helper()
	args := []string{"-sS", "--fail", "-w", " %{size_download} %{size_upload}"}
	if up {
		// The answer (the server's byte count) goes to stdout before -w's.
		args = append(args, "-T", file)
	} else {
		args = append(args, "-o", "/dev/null")
	}
	args = append(args, extra...)
	args = append(args, url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, "curl", args...).Output()
	took := time.Since(start)
	if err != nil {
		b.Fatalf("curl %v: %v", args, err)
	}
	if up {
		// stdout: the server's count, then " <down> <up>".
		if f := strings.Fields(string(out)); len(f) != 3 || f[0] != strconv.FormatInt(size, 10) {
			b.Fatalf("upload through %v: server counted %q, want %d", extra, out, size)
		}
	} else if f := strings.Fields(string(out)); len(f) != 2 || f[0] != strconv.FormatInt(size, 10) {
		b.Fatalf("download through %v: curl reports %q, want %d bytes", extra, out, size)
	}
	return took
}

// BenchmarkEgressCurl is egress as a user meets it: curl moving one large
// file (EGRESS_BENCH_BYTES, default 256 MiB) from and to a local web
// server, down (GET, the server sendfiles) and up (PUT), best of three
// rounds, over the paths taken in turn each round: plain loopback, `socat
// -b 262144` relaying a port to the server (the naive relay), botd's SOCKS
// proxy in direct mode with the server allowed by an EGRESS_ALLOW policy,
// the proxy in tunnel mode (the egress agent in this process dialling the
// server), and a bare splice relay (the control). The web server and curl
// are processes of their own. It reports each path's best rate (MB/s), its
// ratio to socat's best (goal: direct >= 1.0) and the relay's least CPU
// per byte over the rounds (socat's process and its children, or this
// process). Run it with -benchtime 1x.
func BenchmarkEgressCurl(b *testing.B) {
	for _, tool := range []string{"curl", "socat"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				b.Fatalf("%s is missing (scripts/provision.sh installs it)", tool)
			}
			b.Skipf("%s is missing (scripts/provision.sh installs it)", tool)
		}
	}
	size := benchCurlSize(b)
	file := filepath.Join(b.TempDir(), "payload")
	f, err := os.Create(file)
	if err != nil {
		b.Fatal(err)
	}
	// Sparse: no disk I/O, the page cache answers with zeroes.
	if err := f.Truncate(size); err != nil {
		b.Fatal(err)
	}
	_ = f.Close()
	server := fileServer(b, file)
	socat, socatPid := socatRelay(b, server)
	direct := newProxy(b, Options{Allow: egresspolicy.MustParse("127.0.0.1/32")}).Addr().String()
	tunnel := newTunnelSetup(b, Options{}, nil).p.Addr().String()
	// Every path names the server the same way; only the route differs.
	serverURL := "http://" + server + "/payload"
	type path struct {
		name string
		url  string
		args []string // curl's
	}
	paths := []path{
		{"loopback", serverURL, nil},
		{"socat", "http://" + socat + "/payload", nil},
		{"direct", serverURL, []string{"--socks5", direct}},
		{"tunnel", serverURL, []string{"--socks5", tunnel}},
		// The control: BenchmarkRelayCeiling's bare splice relay (accept,
		// dial, splice both ways; no SOCKS, no policy), in this process as
		// the proxy is: what direct mode's relay was until it measured
		// slower than socat here (it copies now, see copyTCP).
		{"splice", "http://" + spliceRelay(b, server) + "/payload", nil},
	}
	// EGRESS_BENCH_PATHS (names, comma-separated) keeps only those paths
	// (and socat, the yardstick).
	if only := os.Getenv("EGRESS_BENCH_PATHS"); only != "" {
		keep := strings.Split(only, ",")
		paths = slices.DeleteFunc(paths, func(p path) bool {
			return !slices.Contains(keep, p.name) && p.name != "socat"
		})
	}
	const rounds = 3
	mbps := func(d time.Duration) float64 { return float64(size) / d.Seconds() / 1e6 }
	for i := 0; i < b.N; i++ {
		for _, dir := range []string{"down", "up"} {
			best := map[string]time.Duration{}
			cpu := map[string]time.Duration{}
			for r := 0; r < rounds; r++ {
				for _, p := range paths {
					// The relay's CPU: socat's process, or this one (the
					// proxy, and in tunnel mode the agent too; the web
					// server and curl are processes of their own).
					used := processCPU
					switch p.name {
					case "socat":
						used = func() time.Duration { return socatCPU(b, socatPid) }
					case "loopback":
						used = func() time.Duration { return 0 }
					}
					cpu0 := used()
					d := curlRun(b, p.url, dir == "up", file, size, p.args...)
					c := used() - cpu0
					if best[p.name] == 0 || d < best[p.name] {
						best[p.name] = d
					}
					if _, ok := cpu[p.name]; !ok || c < cpu[p.name] {
						cpu[p.name] = c
					}
				}
			}
			for _, p := range paths {
				b.ReportMetric(mbps(best[p.name]), dir+"-"+p.name+"-MB/s")
			}
			for _, p := range paths {
				if p.name != "loopback" {
					b.ReportMetric(float64(cpu[p.name].Nanoseconds())/float64(size), dir+"-"+p.name+"-cpu-ns/B")
				}
			}
			for _, p := range paths {
				if p.name != "socat" {
					b.ReportMetric(best["socat"].Seconds()/best[p.name].Seconds(), dir+"-"+p.name+"/socat")
				}
			}
		}
	}
	b.ReportMetric(float64(size>>20), "MiB")
	b.ReportMetric(0, "ns/op")
}
