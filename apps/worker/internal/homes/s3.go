package homes

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Options configures an S3 store.
type S3Options struct {
	// Endpoint is host:port of the S3-compatible service.
	Endpoint string
	// Secure selects https.
	Secure               bool
	AccessKey, SecretKey string
	Region               string
	Bucket               string
	// Prefix is prepended to every object name (e.g. "worker-1/").
	Prefix string
	// SpoolDir holds Open's verified copy of a checkpoint (default
	// os.TempDir()); the file is unlinked at once and lives only as the
	// returned reader.
	SpoolDir string
	// PartSize is the multipart upload part size (default 16 MiB): Put
	// buffers one part in memory at a time; the largest checkpoint is
	// 10,000 parts.
	PartSize uint64
	// Transport overrides the HTTP transport (tests).
	Transport http.RoundTripper
}

// S3 keeps checkpoints in an S3-compatible bucket, one object per home key:
//
//	<prefix>homes/<home-key>.tar     the latest tar; its revision (number,
//	                                 size, sha256, time) is the object's
//	                                 user metadata
//	<prefix>staging/<home-key>/<id>  a checkpoint being uploaded
//
// Why staging + copy rather than one PUT: S3 replaces an object atomically
// (readers see the old or the new object whole, and an aborted multipart
// upload never becomes visible), but the revision's SHA-256 is only known
// after the stream ends, while user metadata must be sent when the upload
// starts. So Put streams to a staging object, hashing as it goes, then
// server-side copies it over the final name with the revision as its
// metadata — one atomic replace that carries tar and revision together, so
// they can never disagree — and removes the staging object. A killed Put
// leaves the previous object untouched (at worst a stale staging object,
// removed by the next Put of that key; an incomplete multipart upload is the
// bucket's abort-incomplete-uploads lifecycle rule's to collect).
//
// Puts of one key are serialized inside this process; two workers sharing
// one prefix are not coordinated (give each worker its own prefix).
type S3 struct {
	c        *minio.Client
	bucket   string
	prefix   string
	spoolDir string
	partSize uint64
	locks    keyLocks
	now      func() time.Time
}

// maxSingleCopy is S3's limit for one server-side copy request.
const maxSingleCopy = 5 << 30

const (
	metaRevision = "Home-Revision"
	metaSHA256   = "Home-Sha256"
	metaSize     = "Home-Size"
	metaAt       = "Home-At"
)

// NewS3 connects to the bucket, creating it if it does not exist.
func NewS3(ctx context.Context, o S3Options) (*S3, error) {
	if o.Bucket == "" || o.Endpoint == "" {
		return nil, errors.New("home store: S3 needs an endpoint and a bucket")
	}
	c, err := minio.New(o.Endpoint, &minio.Options{
		Creds:     credentials.NewStaticV4(o.AccessKey, o.SecretKey, ""),
		Secure:    o.Secure,
		Region:    o.Region,
		Transport: o.Transport,
	})
	if err != nil {
		return nil, fmt.Errorf("home store: S3 client: %w", err)
	}
	ok, err := c.BucketExists(ctx, o.Bucket)
	if err != nil {
		return nil, fmt.Errorf("home store: S3 bucket %s: %w", o.Bucket, err)
	}
	if !ok {
		if err := c.MakeBucket(ctx, o.Bucket, minio.MakeBucketOptions{Region: o.Region}); err != nil {
			return nil, fmt.Errorf("home store: make S3 bucket %s: %w", o.Bucket, err)
		}
	}
	s := &S3{c: c, bucket: o.Bucket, prefix: o.Prefix, spoolDir: o.SpoolDir, partSize: o.PartSize, now: time.Now}
	if s.spoolDir == "" {
		s.spoolDir = os.TempDir()
	}
	if s.partSize == 0 {
		s.partSize = 16 << 20
	}
	return s, nil
}

func (s *S3) object(key string) string     { return s.prefix + "homes/" + key + ".tar" }
func (s *S3) stagingDir(key string) string { return s.prefix + "staging/" + key + "/" }

// Put implements Store.
func (s *S3) Put(ctx context.Context, key string, r io.Reader) (Revision, error) {
	if err := ValidKey(key); err != nil {
		return Revision{}, err
	}
	unlock, err := s.locks.lock(ctx, key)
	if err != nil {
		return Revision{}, err
	}
	defer unlock()

	prev, _, err := s.stat(ctx, key)
	if err != nil && !errors.Is(err, ErrCorrupt) {
		return Revision{}, err
	}
	s.removeStaging(ctx, key)
	var id [8]byte
	_, _ = rand.Read(id[:])
	staging := s.stagingDir(key) + hex.EncodeToString(id[:])
	// An empty stream is refused before anything is uploaded.
	br := bufio.NewReaderSize(ctxReader{ctx, r}, 64<<10)
	if _, err := br.Peek(1); err == io.EOF {
		return Revision{}, ErrEmpty
	} else if err != nil {
		return Revision{}, fmt.Errorf("home store: read checkpoint (the previous checkpoint is kept): %w", err)
	}
	hr := newHashingReader(br)
	_, err = s.c.PutObject(ctx, s.bucket, staging, hr, -1, minio.PutObjectOptions{
		PartSize:    s.partSize,
		ContentType: "application/x-tar",
		// No aws-chunked signed streaming: some S3-compatible servers
		// (gofakes3 among them) store the chunk framing of a multipart
		// part as data. The payload's integrity is the revision's SHA-256,
		// checked by Open; use Secure (TLS) against a remote service.
		DisableContentSha256: true,
	})
	if err != nil {
		s.removeStaging(context.WithoutCancel(ctx), key)
		return Revision{}, fmt.Errorf("home store: upload checkpoint (the previous checkpoint is kept): %w", err)
	}
	defer s.removeStaging(context.WithoutCancel(ctx), key)
	if hr.n == 0 {
		return Revision{}, ErrEmpty
	}
	rev := Revision{Number: prev.Number + 1, Size: hr.n, SHA256: hr.sum(), At: s.now().UTC().Truncate(time.Millisecond)}
	dst := minio.CopyDestOptions{Bucket: s.bucket, Object: s.object(key), ReplaceMetadata: true, UserMetadata: map[string]string{
		metaRevision: strconv.FormatInt(rev.Number, 10),
		metaSHA256:   rev.SHA256,
		metaSize:     strconv.FormatInt(rev.Size, 10),
		metaAt:       rev.At.Format(time.RFC3339Nano),
	}}
	src := minio.CopySrcOptions{Bucket: s.bucket, Object: staging}
	if rev.Size <= maxSingleCopy {
		_, err = s.c.CopyObject(ctx, dst, src)
	} else {
		// One copy request is limited to 5 GiB; beyond, a multipart copy.
		_, err = s.c.ComposeObject(ctx, dst, src)
	}
	if err != nil {
		return Revision{}, fmt.Errorf("home store: commit checkpoint (the previous checkpoint is kept): %w", err)
	}
	return rev, nil
}

// removeStaging deletes key's staging objects (best effort).
func (s *S3) removeStaging(ctx context.Context, key string) {
	for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.stagingDir(key), Recursive: true}) {
		if o.Err != nil {
			return
		}
		_ = s.c.RemoveObject(ctx, s.bucket, o.Key, minio.RemoveObjectOptions{})
	}
}

// stat returns key's revision from its object's metadata; ok false when
// there is no object.
func (s *S3) stat(ctx context.Context, key string) (Revision, bool, error) {
	info, err := s.c.StatObject(ctx, s.bucket, s.object(key), minio.StatObjectOptions{})
	if err != nil {
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey || minio.ToErrorResponse(err).StatusCode == http.StatusNotFound {
			return Revision{}, false, nil
		}
		return Revision{}, false, fmt.Errorf("home store: S3 stat: %w", err)
	}
	rev, err := parseRevision(info.UserMetadata)
	if err != nil {
		return Revision{}, false, fmt.Errorf("%w: home %s: %v", ErrCorrupt, key, err)
	}
	return rev, true, nil
}

func parseRevision(m map[string]string) (Revision, error) {
	get := func(k string) string {
		for mk, v := range m {
			if strings.EqualFold(mk, k) {
				return v
			}
		}
		return ""
	}
	var rev Revision
	var err error
	if rev.Number, err = strconv.ParseInt(get(metaRevision), 10, 64); err != nil {
		return rev, errors.New("object metadata has no revision number")
	}
	if rev.Size, err = strconv.ParseInt(get(metaSize), 10, 64); err != nil {
		return rev, errors.New("object metadata has no size")
	}
	if rev.SHA256 = get(metaSHA256); len(rev.SHA256) != 64 {
		return rev, errors.New("object metadata has no SHA-256")
	}
	if rev.At, err = time.Parse(time.RFC3339Nano, get(metaAt)); err != nil {
		return rev, errors.New("object metadata has no time")
	}
	return rev, nil
}

// Latest implements Store.
func (s *S3) Latest(ctx context.Context, key string) (Revision, bool, error) {
	if err := ValidKey(key); err != nil {
		return Revision{}, false, err
	}
	return s.stat(ctx, key)
}

// Open implements Store. The object is downloaded into an unlinked spool
// file and checked against its revision before the reader is returned.
func (s *S3) Open(ctx context.Context, key string) (io.ReadCloser, Revision, error) {
	if err := ValidKey(key); err != nil {
		return nil, Revision{}, err
	}
	obj, err := s.c.GetObject(ctx, s.bucket, s.object(key), minio.GetObjectOptions{})
	if err != nil {
		return nil, Revision{}, fmt.Errorf("home store: S3 get: %w", err)
	}
	defer obj.Close()
	// Stat through the same object handle: the revision and the bytes come
	// from one GET, so a concurrent Put cannot pair one with the other.
	info, err := obj.Stat()
	if err != nil {
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey || minio.ToErrorResponse(err).StatusCode == http.StatusNotFound {
			return nil, Revision{}, ErrNotFound
		}
		return nil, Revision{}, fmt.Errorf("home store: S3 get: %w", err)
	}
	rev, err := parseRevision(info.UserMetadata)
	if err != nil {
		return nil, Revision{}, fmt.Errorf("%w: home %s: %v", ErrCorrupt, key, err)
	}
	f, err := os.CreateTemp(s.spoolDir, ".home-spool-*")
	if err != nil {
		return nil, Revision{}, diskErr("spool checkpoint", err)
	}
	_ = os.Remove(f.Name())
	hr := newHashingReader(ctxReader{ctx, obj})
	_, err = io.Copy(f, hr)
	if err != nil {
		f.Close()
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			return nil, Revision{}, ErrNotFound
		}
		return nil, Revision{}, fmt.Errorf("home store: download checkpoint: %w", err)
	}
	switch {
	case hr.n != rev.Size:
		err = fmt.Errorf("%w: %d bytes stored, %d recorded", ErrCorrupt, hr.n, rev.Size)
	case hr.sum() != rev.SHA256:
		err = fmt.Errorf("%w: SHA-256 %s does not match the recorded %s", ErrCorrupt, hr.sum(), rev.SHA256)
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, Revision{}, fmt.Errorf("home %s revision %d: %w", key, rev.Number, err)
	}
	return f, rev, nil
}

// Delete implements Store.
func (s *S3) Delete(ctx context.Context, key string) error {
	if err := ValidKey(key); err != nil {
		return err
	}
	unlock, err := s.locks.lock(ctx, key)
	if err != nil {
		return err
	}
	defer unlock()
	s.removeStaging(ctx, key)
	if err := s.c.RemoveObject(ctx, s.bucket, s.object(key), minio.RemoveObjectOptions{}); err != nil &&
		minio.ToErrorResponse(err).Code != minio.NoSuchKey {
		return fmt.Errorf("home store: S3 delete: %w", err)
	}
	return nil
}
