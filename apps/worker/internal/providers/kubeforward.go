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
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// podDialer dials one port of one pod through the API server's
// portforward subresource (what `kubectl port-forward` uses): every
// net.Conn it returns is a pair of streams on one SPDY connection to the
// kubelet, made on first use and again whenever it closed (the pod was
// replaced, the API server restarted). Nothing listens on the worker's
// host: the botd client's transport dials through it directly, so the
// pod's port is reachable by this process alone.
type podDialer struct {
	cfg       *rest.Config
	cs        kubernetes.Interface
	namespace string
	pod       string
	port      int

	mu   sync.Mutex
	conn httpstream.Connection
	next int
}

func newPodDialer(cfg *rest.Config, cs kubernetes.Interface, namespace, pod string, port int) *podDialer {
	return &podDialer{cfg: cfg, cs: cs, namespace: namespace, pod: pod, port: port}
}

// connection is the live SPDY connection, dialed when there is none.
func (d *podDialer) connection(ctx context.Context) (httpstream.Connection, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn != nil {
		select {
		case <-d.conn.CloseChan():
			d.conn = nil
		default:
			return d.conn, nil
		}
	}
	rt, upgrader, err := spdy.RoundTripperFor(d.cfg)
	if err != nil {
		return nil, err
	}
	u := d.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(d.namespace).Name(d.pod).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	type result struct {
		c   httpstream.Connection
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, _, err := dialer.Dial(portforward.PortForwardProtocolV1Name)
		ch <- result{c, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("port-forward to pod %s/%s: %w", d.namespace, d.pod, r.err)
		}
		d.conn = r.c
		return r.c, nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// DialContext opens a stream to the pod's port (network and address are
// ignored: the transport's one destination is this pod).
func (d *podDialer) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	conn, err := d.connection(ctx)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.next++
	id := d.next
	d.mu.Unlock()
	h := http.Header{}
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	h.Set(corev1.PortHeader, strconv.Itoa(d.port))
	h.Set(corev1.PortForwardRequestIDHeader, strconv.Itoa(id))
	errStream, err := conn.CreateStream(h)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("port-forward to pod %s/%s: %w", d.namespace, d.pod, err)
	}
	// Nothing is written on the error stream; the kubelet writes one
	// message there when it cannot reach the port.
	errStream.Close()
	h.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := conn.CreateStream(h)
	if err != nil {
		conn.RemoveStreams(errStream)
		return nil, fmt.Errorf("port-forward to pod %s/%s: %w", d.namespace, d.pod, err)
	}
	c := &streamConn{data: data, remove: func() { conn.RemoveStreams(errStream, data) }, failed: make(chan struct{})}
	go func() {
		msg, _ := io.ReadAll(io.LimitReader(errStream, 4096))
		if len(msg) > 0 {
			c.fail(fmt.Errorf("port-forward to pod %s/%s port %d: %s", d.namespace, d.pod, d.port, msg))
		}
	}()
	return c, nil
}

// Close ends the SPDY connection (the streams on it end with it).
func (d *podDialer) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn != nil {
		d.conn.Close()
		d.conn = nil
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
	if err != nil {
		select {
		case <-c.failed:
			return n, c.err
		default:
		}
	}
	return n, err
}

func (c *streamConn) Write(p []byte) (int, error) {
	n, err := c.data.Write(p)
	if err != nil {
		select {
		case <-c.failed:
			return n, c.err
		default:
		}
	}
	return n, err
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
