// Package deploytest tests what deploy/ and `make worker-image` give an
// operator, against real components: the worker image
// (scripts/build-worker-image.sh) run on the Docker engine with the docker
// provider makes a computer whose botd answers a tool call; the Kubernetes
// manifest (deploy/kubernetes/worker.yaml, with worker-rbac.yaml: a worker
// group) is accepted by a real API server (KUBE_TEST_KUBECONFIG), keeps the
// operator's listener and the group port off its public Service and admits
// only the worker pods to the group port; the systemd unit says what
// docs/operations.md claims and passes `systemd-analyze verify`. It has
// tests only. A missing engine, cluster or tool skips on a laptop and fails
// under CI=true.
package deploytest
