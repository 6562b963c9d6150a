package desktop

import (
	"bufio"
	"bytes"
	"github.com/open-bot/computer/pkg/shared/jpegenc"
	"image"
	"image/draw"
	_ "image/jpeg"
	_ "image/png"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/BurntSushi/xgb/xproto"

	"github.com/open-bot/computer/apps/botd/internal/runner"
	"github.com/open-bot/computer/apps/botd/internal/testenv"
	"github.com/open-bot/computer/pkg/shared"
)

// Benchmarks run against a real Xvfb whose root window shows an XFCE
// wallpaper (a busy frame, like the default desktop): run them with
// scripts/bench.sh or
//
//	go test -run '^$' -bench . -benchtime 200x ./apps/botd/internal/desktop

// benchWallpaper is the XFCE wallpaper painted on the root window.
var benchWallpaper = "/usr/share/backgrounds/xfce/xfce-teal.jpg"

// Frames the capture benchmarks run on. The XFCE wallpapers are smooth
// (about 25 kB as JPEG q72); "busy" adds a fixed pseudo-random texture
// that brings the frame to about the size of a busy desktop (FIELD-NOTES:
// ~180 kB), the hard case for the encoder.
var benchFrames = []struct {
	name  string
	noise int
}{{"xfce", 0}, {"busy", 30}}

// paintWallpaper scales the wallpaper to cover the screen, adds ±noise of
// texture, and makes it the root window's background.
func paintWallpaper(tb testing.TB, x *testX, noise ...int) {
	tb.Helper()
	f, err := os.Open(benchWallpaper)
	if err != nil {
		testenv.Unavailable(tb, "wallpaper %s: %v (install xfce4)", benchWallpaper, err)
	}
	defer f.Close()
	src, _, err := image.Decode(f)
	if err != nil {
		tb.Fatal(err)
	}
	const w, h = 1280, 800
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	sb := src.Bounds()
	scale := max(float64(w)/float64(sb.Dx()), float64(h)/float64(sb.Dy()))
	rgba := image.NewRGBA(sb)
	draw.Draw(rgba, sb, src, sb.Min, draw.Src)
	for y := 0; y < h; y++ {
		for xx := 0; xx < w; xx++ {
			sx := sb.Min.X + int(float64(xx)/scale)
			sy := sb.Min.Y + int(float64(y)/scale)
			o := rgba.PixOffset(sx, sy)
			d := img.PixOffset(xx, y)
			copy(img.Pix[d:d+4], rgba.Pix[o:o+4])
		}
	}
	if len(noise) > 0 && noise[0] > 0 {
		rng := rand.New(rand.NewPCG(1, 2))
		n := noise[0]
		for i := range img.Pix {
			if i%4 == 3 {
				continue
			}
			v := int(img.Pix[i]) + rng.IntN(2*n+1) - n
			img.Pix[i] = byte(min(255, max(0, v)))
		}
	}
	ctx := testenv.Context(tb, 30*time.Second)
	xc, err := dialX(ctx, x.display, x.xauth, true)
	if err != nil {
		tb.Fatal(err)
	}
	defer xc.close()
	c := xc.c
	root := xproto.Window(xc.root)
	pm, err := xproto.NewPixmapId(c)
	if err != nil {
		tb.Fatal(err)
	}
	gc, err := xproto.NewGcontextId(c)
	if err != nil {
		tb.Fatal(err)
	}
	if err := xproto.CreatePixmapChecked(c, 24, pm, xproto.Drawable(root), w, h).Check(); err != nil {
		tb.Fatal(err)
	}
	if err := xproto.CreateGCChecked(c, gc, xproto.Drawable(pm), 0, nil).Check(); err != nil {
		tb.Fatal(err)
	}
	const rows = 40 // keeps each PutImage under the 256 KiB request limit
	buf := make([]byte, w*4*rows)
	for y := 0; y < h; y += rows {
		for r := 0; r < rows; r++ {
			for xx := 0; xx < w; xx++ {
				o := img.PixOffset(xx, y+r)
				d := (r*w + xx) * 4
				buf[d], buf[d+1], buf[d+2], buf[d+3] = img.Pix[o+2], img.Pix[o+1], img.Pix[o], 0
			}
		}
		if err := xproto.PutImageChecked(c, xproto.ImageFormatZPixmap, xproto.Drawable(pm), gc, w, rows, 0, int16(y), 0, 24, buf).Check(); err != nil {
			tb.Fatal(err)
		}
	}
	if err := xproto.ChangeWindowAttributesChecked(c, root, xproto.CwBackPixmap, []uint32{uint32(pm)}).Check(); err != nil {
		tb.Fatal(err)
	}
	if err := xproto.ClearAreaChecked(c, false, root, 0, 0, 0, 0).Check(); err != nil {
		tb.Fatal(err)
	}
	// The pixmap must outlive this connection: keep it with RetainPermanent.
	if err := xproto.SetCloseDownModeChecked(c, xproto.CloseDownRetainPermanent).Check(); err != nil {
		tb.Fatal(err)
	}
}

// percentile of sorted durations, in milliseconds.
func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p)
	return float64(sorted[i].Microseconds()) / 1000
}

// reportLatency reports p50 and max, and a tail percentile only from
// samples enough to mean it: p90 from 30, p99 from 200.
func reportLatency(b *testing.B, name string, ds []time.Duration) {
	slices.Sort(ds)
	b.ReportMetric(percentile(ds, 0.5), name+"_p50_ms")
	if len(ds) >= 30 {
		b.ReportMetric(percentile(ds, 0.9), name+"_p90_ms")
	}
	if len(ds) >= 200 {
		b.ReportMetric(percentile(ds, 0.99), name+"_p99_ms")
	}
	b.ReportMetric(percentile(ds, 1), name+"_max_ms")
}

// scrotOnce runs `scrot -p -q 72` as the desktop user, like the reference.
func scrotOnce(b *testing.B, x *testX, out string) time.Duration {
	u := x.user
	start := time.Now()
	p, err := runner.Exec{}.Start(runner.Spec{Argv: []string{"scrot", "-o", "-p", "-q", "72", out}, User: &u, Env: x.env(), Dir: x.dir})
	if err != nil {
		b.Fatal(err)
	}
	if code, err := p.Wait(); err != nil || code != 0 {
		b.Fatalf("scrot: exit %d %v", code, err)
	}
	return time.Since(start)
}

// scrotCore is scrot's own grab and encode without its process start: the
// same Imlib2 calls scrot 1.8 makes (imlib_create_image_from_drawable of
// the root window, the JPEG saver at quality 72, which is Imlib2's loader on
// the system libjpeg) in one long-lived process that grabs a frame for each
// line it reads and answers with the microseconds that took. It leaves out
// scrot's pointer blend (-p), so it flatters scrot slightly. Imlib2 ships no
// headers here, so the few prototypes are declared below.
const scrotCore = `#include <X11/Xlib.h>
#include <stdio.h>
#include <time.h>
typedef void *Imlib_Image;
void imlib_context_set_display(Display *);
void imlib_context_set_visual(Visual *);
void imlib_context_set_colormap(Colormap);
void imlib_context_set_drawable(Drawable);
Imlib_Image imlib_create_image_from_drawable(Pixmap, int, int, int, int, char);
void imlib_context_set_image(Imlib_Image);
void imlib_image_set_format(const char *);
void imlib_image_attach_data_value(const char *, void *, int, void *);
void imlib_save_image(const char *);
void imlib_free_image(void);
int main(int argc, char **argv) {
	if (argc != 2) return 2;
	Display *d = XOpenDisplay(NULL);
	if (!d) return 2;
	Screen *s = DefaultScreenOfDisplay(d);
	imlib_context_set_display(d);
	imlib_context_set_visual(DefaultVisualOfScreen(s));
	imlib_context_set_colormap(DefaultColormapOfScreen(s));
	imlib_context_set_drawable(RootWindowOfScreen(s));
	char line[16];
	while (fgets(line, sizeof line, stdin)) {
		struct timespec a, b;
		clock_gettime(CLOCK_MONOTONIC, &a);
		Imlib_Image im = imlib_create_image_from_drawable(0, 0, 0, WidthOfScreen(s), HeightOfScreen(s), 1);
		if (!im) return 3;
		imlib_context_set_image(im);
		imlib_image_set_format("jpeg");
		imlib_image_attach_data_value("quality", NULL, 72, NULL);
		imlib_save_image(argv[1]);
		imlib_free_image();
		clock_gettime(CLOCK_MONOTONIC, &b);
		printf("%ld\n", (long)(b.tv_sec - a.tv_sec) * 1000000L + (b.tv_nsec - a.tv_nsec) / 1000);
		fflush(stdout);
	}
	return 0;
}
`

// libImlib2 is the library scrot links (the Debian path; no dev package).
const libImlib2 = "/usr/lib/x86_64-linux-gnu/libImlib2.so.1"

// startScrotCore builds scrotCore with gcc and starts it as the desktop
// user on x. It returns one grab+encode+save per call, as scrot times it.
func startScrotCore(b *testing.B, x *testX, out string) func() time.Duration {
	testenv.RequireTools(b, "gcc", "scrot")
	src := filepath.Join(x.dir, "scrotcore.c")
	bin := filepath.Join(x.dir, "scrotcore")
	if err := os.WriteFile(src, []byte(scrotCore), 0o644); err != nil {
		b.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O2", "-o", bin, src, libImlib2, "-lX11").CombinedOutput(); err != nil {
		b.Fatalf("building scrot's grab+encode: %v\n%s", err, out)
	}
	u := x.user
	_ = os.Chown(bin, int(u.UID), int(u.GID))
	stdin, feed := io.Pipe()
	answers, stdout := io.Pipe()
	p, err := runner.Exec{}.Start(runner.Spec{Argv: []string{bin, out}, User: &u, Env: x.env(), Dir: x.dir, Stdin: stdin, Stdout: stdout})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = feed.Close()
		_, _ = p.Wait()
		_ = stdout.Close()
	})
	lines := bufio.NewScanner(answers)
	return func() time.Duration {
		if _, err := io.WriteString(feed, "grab\n"); err != nil {
			b.Fatal(err)
		}
		if !lines.Scan() {
			b.Fatalf("scrot's grab+encode stopped: %v", lines.Err())
		}
		us, err := strconv.Atoi(lines.Text())
		if err != nil {
			b.Fatal(err)
		}
		return time.Duration(us) * time.Microsecond
	}
}

// BenchmarkCaptureVsScrot captures natively, with a scrot process (what a
// user would run) and with scrot's own grab+encode in a running process
// (scrotCore: no process start), in turn, so all three see the same frame
// and the same machine load. The sub-benchmark's name says which JPEG
// encoder this build captures with.
func BenchmarkCaptureVsScrot(b *testing.B) {
	for _, fr := range benchFrames {
		b.Run(fr.name+"/encoder="+jpegenc.Name, func(b *testing.B) {
			requireX(b)
			testenv.RequireTools(b, "scrot")
			x := startX(b)
			paintWallpaper(b, x, fr.noise)
			d := newDesktop(b, x)
			ctx := testenv.Context(b, 10*time.Minute)
			if err := d.Do(ctx, shared.Action{Type: "move", X: ip(640), Y: ip(400)}); err != nil {
				b.Fatal(err)
			}
			out := filepath.Join(x.dir, "scrot.jpg")
			core := startScrotCore(b, x, filepath.Join(x.dir, "core.jpg"))
			var ours, scrot, scrotGrab []time.Duration
			var size int
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				f, err := d.Capture(ctx)
				if err != nil {
					b.Fatal(err)
				}
				ours = append(ours, time.Since(start))
				size = len(f.JPEG)
				scrot = append(scrot, scrotOnce(b, x, out))
				scrotGrab = append(scrotGrab, core())
			}
			b.StopTimer()
			reportLatency(b, "capture", ours)
			slices.Sort(scrot)
			slices.Sort(scrotGrab)
			b.ReportMetric(percentile(scrot, 0.5), "scrot_process_p50_ms")
			b.ReportMetric(percentile(scrotGrab, 0.5), "scrot_grab_encode_p50_ms")
			b.ReportMetric(percentile(ours, 0.5)/percentile(scrot, 0.5), "capture/scrot_process")
			b.ReportMetric(percentile(ours, 0.5)/percentile(scrotGrab, 0.5), "capture/scrot_grab_encode")
			b.ReportMetric(float64(size)/1024, "kB/frame")
			if st, err := os.Stat(out); err == nil {
				b.ReportMetric(float64(st.Size())/1024, "scrot_kB/frame")
			}
		})
	}
}

// BenchmarkCapture is the native capture alone (MIT-SHM, cursor, JPEG) of
// the busy frame.
func BenchmarkCapture(b *testing.B) {
	requireX(b)
	x := startX(b)
	paintWallpaper(b, x, benchFrames[1].noise)
	d := newDesktop(b, x)
	ctx := testenv.Context(b, 10*time.Minute)
	var ds []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := d.Capture(ctx); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
	}
	b.StopTimer()
	reportLatency(b, "capture", ds)
}

// BenchmarkCaptureUnchanged is a capture of a screen that has not changed
// since the previous frame: no encoding, no image bytes.
func BenchmarkCaptureUnchanged(b *testing.B) {
	requireX(b)
	x := startX(b)
	paintWallpaper(b, x, benchFrames[1].noise)
	d := newDesktop(b, x)
	ctx := testenv.Context(b, 10*time.Minute)
	f, err := d.Capture(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var ds []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		_, changed, err := d.CaptureIfChanged(ctx, f.Hash)
		if err != nil {
			b.Fatal(err)
		}
		if changed {
			b.Fatal("an unchanged screen changed")
		}
		ds = append(ds, time.Since(start))
	}
	b.StopTimer()
	reportLatency(b, "unchanged", ds)
}

// BenchmarkEncode is libjpeg-turbo (or image/jpeg) alone on the busy frame.
func BenchmarkEncode(b *testing.B) {
	requireX(b)
	x := startX(b)
	paintWallpaper(b, x, benchFrames[1].noise)
	d := newDesktop(b, x)
	ctx := testenv.Context(b, time.Minute)
	if _, err := d.Capture(ctx); err != nil {
		b.Fatal(err)
	}
	pix := bytes.Clone(d.cap.buf)
	if pix == nil {
		b.Skip("no MIT-SHM buffer")
	}
	enc := jpegenc.New(jpegenc.BGRX)
	defer enc.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := enc.Encode(pix, 1280, 800, 1280*4, JPEGQuality); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTypeExact types the mixed Unicode text into mousepad (GTK) and
// reports characters per second (the text is checked by TestTypeMousepad
// and TestTypeChromium; here only the speed).
func BenchmarkTypeExact(b *testing.B) {
	requireX(b)
	testenv.RequireTools(b, "mousepad")
	x := startX(b)
	d := newDesktop(b, x)
	ctx := testenv.Context(b, 10*time.Minute)
	path := filepath.Join(x.dir, "bench.txt")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		b.Fatal(err)
	}
	_ = os.Chown(path, int(x.user.UID), int(x.user.GID))
	x.startApp(b, []string{"mousepad", "--disable-server", path}, "XDG_CONFIG_HOME="+x.dir+"/config", "XDG_CACHE_HOME="+x.dir+"/cache", "XDG_DATA_HOME="+x.dir+"/data")
	_, wx, wy, ww, wh := topWindow(b, x, "bench.txt", 30*time.Second)
	if err := d.Do(ctx, shared.Action{Type: "click", X: ip(wx + ww/2), Y: ip(wy + wh/2)}); err != nil {
		b.Fatal(err)
	}
	text := mixedText
	n := utf8.RuneCountInString(text)
	var total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// A fresh Desktop each round: its keymap cache starts empty, as
		// after a botd restart (the worst case).
		d2, err := New(x.target(), Options{})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := d2.Do(ctx, shared.Action{Type: "type", Text: &text}); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		d2.Close()
	}
	b.StopTimer()
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "chars/s")
}

// BenchmarkClickVsXdotool compares a click through XTEST on botd's own
// connection with a `xdotool mousemove X Y click 1` process as the desktop
// user (the alternative the design allows), alternating.
func BenchmarkClickVsXdotool(b *testing.B) {
	requireX(b)
	testenv.RequireTools(b, "xdotool")
	x := startX(b)
	d := newDesktop(b, x)
	ctx := testenv.Context(b, 10*time.Minute)
	u := x.user
	var ours, xdo []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		px, py := 100+i%500, 100+i%300
		start := time.Now()
		if err := d.Do(ctx, shared.Action{Type: "click", X: ip(px), Y: ip(py)}); err != nil {
			b.Fatal(err)
		}
		ours = append(ours, time.Since(start))
		start = time.Now()
		p, err := runner.Exec{}.Start(runner.Spec{Argv: []string{"xdotool", "mousemove", strconv.Itoa(px), strconv.Itoa(py), "click", "1"}, User: &u, Env: x.env(), Dir: x.dir})
		if err != nil {
			b.Fatal(err)
		}
		if code, err := p.Wait(); err != nil || code != 0 {
			b.Fatalf("xdotool: exit %d %v", code, err)
		}
		xdo = append(xdo, time.Since(start))
	}
	b.StopTimer()
	reportLatency(b, "xtest_click", ours)
	slices.Sort(xdo)
	b.ReportMetric(percentile(xdo, 0.5), "xdotool_click_p50_ms")
}
