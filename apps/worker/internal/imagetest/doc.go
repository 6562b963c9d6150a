// Package imagetest tests the computer image (images/computer/Dockerfile)
// against the real Docker engine: it builds the image with scripts/build-image.sh,
// runs it the way users do (token in a root-only file mounted read-only, /home
// on a volume, ports published on 127.0.0.1 only) and drives botd's API from
// the host. It has tests only. Without an engine the tests skip on a laptop
// and fail under CI=true.
package imagetest
