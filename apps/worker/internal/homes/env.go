package homes

// The worker's home store and checkpoint limits, read from its environment.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// LimitsFromEnv reads the checkpoint limits (README, Configuration):
//
//	COMPUTER_HOME_MAX_BYTES        a checkpoint's largest tar (default
//	                               10 GiB; at most what botd's import
//	                               accepts, 50 GiB)
//	COMPUTER_HOME_MIN_FREE_BYTES   free space a checkpoint leaves on the
//	                               disk of DATA_DIR/homes (default 1 GiB)
//
// getenv nil reads the process's environment.
func LimitsFromEnv(getenv func(string) string) (maxBytes, minFree int64, err error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	maxBytes, minFree = DefaultMaxBytes, DefaultMinFree
	if v := strings.TrimSpace(getenv("COMPUTER_HOME_MAX_BYTES")); v != "" {
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil {
			return 0, 0, fmt.Errorf("COMPUTER_HOME_MAX_BYTES=%q: a number of bytes", v)
		}
		if err := ValidMaxBytes(n); err != nil {
			return 0, 0, fmt.Errorf("COMPUTER_HOME_MAX_BYTES: %w", err)
		}
		maxBytes = n
	}
	if v := strings.TrimSpace(getenv("COMPUTER_HOME_MIN_FREE_BYTES")); v != "" {
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || n < 0 {
			return 0, 0, fmt.Errorf("COMPUTER_HOME_MIN_FREE_BYTES=%q: a number of bytes, 0 or more", v)
		}
		minFree = n
	}
	return maxBytes, minFree, nil
}

// FromEnv is the AgentHomeStore: Local under dataDir (homes/,
// home-revisions/) by default, or an S3-compatible bucket when
// WORKER_HOMES_S3_ENDPOINT is set:
//
//	WORKER_HOMES_S3_ENDPOINT         host:port
//	WORKER_HOMES_S3_BUCKET           bucket (made if missing)
//	WORKER_HOMES_S3_ACCESS_KEY_FILE  file holding the access key id
//	WORKER_HOMES_S3_SECRET_KEY_FILE  file holding the secret key
//	WORKER_HOMES_S3_REGION           region (optional)
//	WORKER_HOMES_S3_PREFIX           object name prefix (optional)
//	WORKER_HOMES_S3_INSECURE         "true": plain http (loopback only)
//
// It also names the store for people (never a key). getenv nil reads the
// process's environment.
func FromEnv(ctx context.Context, getenv func(string) string, dataDir string) (Store, string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	ep := strings.TrimSpace(getenv("WORKER_HOMES_S3_ENDPOINT"))
	if ep == "" {
		l, err := NewLocal(dataDir)
		return l, "local " + filepath.Join(dataDir, "homes"), err
	}
	readKey := func(name string) (string, error) {
		f := strings.TrimSpace(getenv(name))
		if f == "" {
			return "", fmt.Errorf("%s is required with WORKER_HOMES_S3_ENDPOINT", name)
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	ak, err := readKey("WORKER_HOMES_S3_ACCESS_KEY_FILE")
	if err != nil {
		return nil, "", err
	}
	sk, err := readKey("WORKER_HOMES_S3_SECRET_KEY_FILE")
	if err != nil {
		return nil, "", err
	}
	bucket := strings.TrimSpace(getenv("WORKER_HOMES_S3_BUCKET"))
	if bucket == "" {
		return nil, "", errors.New("WORKER_HOMES_S3_BUCKET is required with WORKER_HOMES_S3_ENDPOINT")
	}
	o := S3Options{Endpoint: ep, Bucket: bucket, AccessKey: ak, SecretKey: sk,
		Region: getenv("WORKER_HOMES_S3_REGION"), Prefix: getenv("WORKER_HOMES_S3_PREFIX"),
		Secure: getenv("WORKER_HOMES_S3_INSECURE") != "true", SpoolDir: dataDir}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := NewS3(sctx, o)
	if err != nil {
		return nil, "", err
	}
	return s, "s3 " + ep + "/" + bucket, nil
}
