package homes

import (
	"bytes"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/require"
)

// newFakeS3 runs an S3 server in this process on 127.0.0.1 and returns a
// store on it.
func newFakeS3(t testing.TB, backend gofakes3.Backend, spool string) *S3 {
	t.Helper()
	srv := httptest.NewServer(gofakes3.New(backend, gofakes3.WithLogger(gofakes3.DiscardLog())).Server())
	t.Cleanup(srv.Close)
	s, err := NewS3(t.Context(), S3Options{
		Endpoint:  strings.TrimPrefix(srv.URL, "http://"),
		AccessKey: "test", SecretKey: "test-secret",
		Region: "us-east-1", Bucket: "homes", Prefix: "w1/",
		SpoolDir: spool, PartSize: 5 << 20,
	})
	require.NoError(t, err)
	return s
}

// replaceBytes rewrites key's object keeping its revision metadata.
func replaceBytes(t *testing.T, s *S3, key string, edit func([]byte) []byte) {
	ctx := t.Context()
	info, err := s.c.StatObject(ctx, s.bucket, s.object(key), minio.StatObjectOptions{})
	require.NoError(t, err)
	obj, err := s.c.GetObject(ctx, s.bucket, s.object(key), minio.GetObjectOptions{})
	require.NoError(t, err)
	b, err := io.ReadAll(obj)
	require.NoError(t, err)
	obj.Close()
	b = edit(b)
	_, err = s.c.PutObject(ctx, s.bucket, s.object(key), bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{UserMetadata: info.UserMetadata})
	require.NoError(t, err)
}

func s3Harness() harness {
	return harness{
		open: func(t *testing.T) Store { return newFakeS3(t, s3mem.New(), t.TempDir()) },
		corrupt: func(t *testing.T, s Store, key string) {
			replaceBytes(t, s.(*S3), key, func(b []byte) []byte { copy(b[4096:], "garbage!"); return b })
		},
		truncate: func(t *testing.T, s Store, key string) {
			replaceBytes(t, s.(*S3), key, func(b []byte) []byte { return b[:len(b)/2] })
		},
	}
}

func TestS3Conformance(t *testing.T) { runConformance(t, s3Harness()) }

// A Put killed after its upload leaves a staging object; it is never read,
// and the next Put of that key removes it.
func TestS3StaleStaging(t *testing.T) {
	s := newFakeS3(t, s3mem.New(), t.TempDir())
	ctx := t.Context()
	a := payload(1, 1<<20)
	_, err := s.Put(ctx, "k", bytes.NewReader(a))
	require.NoError(t, err)
	stale := payload(2, 1<<20)
	_, err = s.c.PutObject(ctx, s.bucket, s.stagingDir("k")+"deadbeef", bytes.NewReader(stale), int64(len(stale)), minio.PutObjectOptions{})
	require.NoError(t, err)
	got, rev := readAll(t, s, "k")
	require.Equal(t, sum(a), sum(got))
	require.Equal(t, int64(1), rev.Number)

	_, err = s.Put(ctx, "k", bytes.NewReader(payload(3, 1000)))
	require.NoError(t, err)
	n := 0
	for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + "staging/", Recursive: true}) {
		require.NoError(t, o.Err)
		n++
	}
	require.Zero(t, n, "staging objects are removed")
	// The spool dir keeps nothing behind either.
}

// Open's spool file is unlinked at once: nothing stays in SpoolDir.
func TestS3SpoolLeavesNothing(t *testing.T) {
	spool := t.TempDir()
	s := newFakeS3(t, s3mem.New(), spool)
	_, err := s.Put(t.Context(), "k", bytes.NewReader(payload(1, 1<<20)))
	require.NoError(t, err)
	rc, _, err := s.Open(t.Context(), "k")
	require.NoError(t, err)
	ents, err := readDirNames(spool)
	require.NoError(t, err)
	require.Empty(t, ents)
	require.NoError(t, rc.Close())
}
