package providers

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// podDialer dials one port of one pod through the API server's
// portforward subresource (what `kubectl port-forward` uses). Each net.Conn
// it returns is a pair of streams on an SPDY connection of its own to the
// kubelet: on containerd 1.6 a connection whose forwarded TCP connection
// ended could stop answering new streams (seen on the test cluster: no
// reply for 30 s), so one connection never carries two. The botd client's
// transport keeps its connections alive, so dials are few. Nothing
// listens on the worker's host: the transport dials through this
// directly, so the pod's port is reachable by this process alone.
type podDialer struct {
	cfg       *rest.Config
	cs        kubernetes.Interface
	namespace string
	pod       string
	port      int

	mu    sync.Mutex
	open  map[*streamConn]struct{}
	close bool
	// denied is the API server's refusal of the last dial (401 or 403):
	// retrying does not help, so a start reports it at once.
	denied error
}

// Denied is the API server's refusal of the last dial, if it refused it.
func (d *podDialer) Denied() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.denied
}

func newPodDialer(cfg *rest.Config, cs kubernetes.Interface, namespace, pod string, port int) *podDialer {
	return &podDialer{cfg: cfg, cs: cs, namespace: namespace, pod: pod, port: port, open: map[*streamConn]struct{}{}}
}

// streamTimeout bounds the upgrade and the creation of one connection's
// streams: the kubelet answers in milliseconds.
const streamTimeout = 15 * time.Second

// DialContext opens a connection to the pod's port (network and address
// are ignored: the transport's one destination is this pod).
func (d *podDialer) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	type result struct {
		c   *streamConn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := d.dial()
		ch <- result{c, err}
	}()
	t := time.NewTimer(streamTimeout)
	defer t.Stop()
	var err error
	select {
	case r := <-ch:
		d.mu.Lock()
		defer d.mu.Unlock()
		d.denied = nil
		if r.err != nil {
			err := fmt.Errorf("port-forward to pod %s/%s: %w", d.namespace, d.pod, r.err)
			if apierrors.IsForbidden(r.err) || apierrors.IsUnauthorized(r.err) {
				d.denied = err
			}
			return nil, err
		}
		if d.close {
			r.c.Close()
			return nil, fmt.Errorf("port-forward to pod %s/%s: the dialer is closed", d.namespace, d.pod)
		}
		d.open[r.c] = struct{}{}
		return r.c, nil
	case <-t.C:
		err = fmt.Errorf("port-forward to pod %s/%s: no answer in %s", d.namespace, d.pod, streamTimeout)
	case <-ctx.Done():
		err = ctx.Err()
	}
	go func() {
		if r := <-ch; r.c != nil {
			r.c.Close()
		}
	}()
	return nil, err
}

// dial makes a new SPDY connection and its error and data streams.
func (d *podDialer) dial() (*streamConn, error) {
	rt, upgrader, err := spdy.RoundTripperFor(d.cfg)
	if err != nil {
		return nil, err
	}
	u := d.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(d.namespace).Name(d.pod).SubResource("portforward").URL()
	conn, _, err := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u).Dial(portforward.PortForwardProtocolV1Name)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	h.Set(corev1.PortHeader, strconv.Itoa(d.port))
	h.Set(corev1.PortForwardRequestIDHeader, "0")
	errStream, err := conn.CreateStream(h)
	if err != nil {
		conn.Close()
		return nil, err
	}
	// Nothing is written on the error stream; the kubelet writes one
	// message there when it cannot reach the port.
	errStream.Close()
	h.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := conn.CreateStream(h)
	if err != nil {
		conn.Close()
		return nil, err
	}
	c := &streamConn{data: data, failed: make(chan struct{})}
	c.remove = func() {
		conn.Close()
		d.mu.Lock()
		delete(d.open, c)
		d.mu.Unlock()
	}
	go func() {
		msg, _ := io.ReadAll(io.LimitReader(errStream, 4096))
		if len(msg) > 0 {
			c.fail(fmt.Errorf("port-forward to pod %s/%s port %d: %s", d.namespace, d.pod, d.port, msg))
		}
	}()
	return c, nil
}

// Close ends every connection this dialer made; later dials fail.
func (d *podDialer) Close() {
	d.mu.Lock()
	d.close = true
	open := make([]*streamConn, 0, len(d.open))
	for c := range d.open {
		open = append(open, c)
	}
	d.mu.Unlock()
	for _, c := range open {
		c.Close()
	}
}

// streamConn is a port-forward data stream as a net.Conn. Deadlines are
// not supported by the streams: callers bound their calls with contexts
// (the HTTP client's and the websocket library's).
type streamConn struct {
	data   httpstream.Stream
	remove func()

	once   sync.Once
	closed sync.Once
	failed chan struct{}
	err    error
}

func (c *streamConn) fail(err error) {
	c.once.Do(func() {
		c.err = err
		close(c.failed)
		c.Close()
	})
}

func (c *streamConn) Read(p []byte) (int, error) {
	n, err := c.data.Read(p)
	return n, c.why(err)
}

func (c *streamConn) Write(p []byte) (int, error) {
	n, err := c.data.Write(p)
	return n, c.why(err)
}

// why is err, or the kubelet's reason when it wrote one on the error
// stream (the stream ended because the pod's port could not be reached).
func (c *streamConn) why(err error) error {
	if err != nil {
		select {
		case <-c.failed:
			return c.err
		default:
		}
	}
	return err
}

func (c *streamConn) Close() error {
	c.closed.Do(func() {
		c.data.Reset()
		c.remove()
	})
	return nil
}

func (c *streamConn) LocalAddr() net.Addr  { return forwardAddr{} }
func (c *streamConn) RemoteAddr() net.Addr { return forwardAddr{} }

// The deadline setters do nothing: a stream has no deadlines, and the
// callers' contexts bound their calls.
func (c *streamConn) SetDeadline(time.Time) error      { return nil }
func (c *streamConn) SetReadDeadline(time.Time) error  { return nil }
func (c *streamConn) SetWriteDeadline(time.Time) error { return nil }

type forwardAddr struct{}

func (forwardAddr) Network() string { return "port-forward" }
func (forwardAddr) String() string  { return "port-forward" }
