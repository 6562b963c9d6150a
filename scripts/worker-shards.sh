# worker-shards.sh — the shards of apps/worker's tests (sourced by
# scripts/test.sh). `make test` builds apps/worker's test binary once and
# runs it once per shard, all shards at the same time and beside the other
# packages' `go test`; inside a shard the tests run one after another, as
# before. Each named shard runs exactly its tests (-test.run '^(A|B)$'); the
# last shard, "rest", runs every test no named shard names (-test.skip of all
# their names), so a new test is never left out: it lands in "rest" unless
# it is put in a named shard here. Shards are the default; WORKER_SHARDS=0
# runs the package as one process.
#
# The collision rule. Tests of different shards run at the same time, so
# two tests in different shards must share no fixed resource:
#   - X displays: startComputer*(t, …, D, …) gives botd DISPLAY_BASE=D (its
#     screens take D, D+1, … up to MAX_SCREENS, default 2 there); a local
#     provider worker (WORKER_LOCAL_DISPLAY_BASE=D, WORKER_LOCAL_SLOTS=S)
#     takes D … D+4·S−1.
#   - loopback ports: VIEW_PORT_BASE=P (default 21000+10·D in startComputer)
#     takes P … P+2·MAX_SCREENS−1; WORKER_LOCAL_PORT_BASE=P takes
#     P … P+10·S−1; a fixed listen address (controlplane_test.go's
#     127.0.0.1:31400) is one port. Ports inside a container (18080, 18081)
#     are the container's own and free to reuse.
#   - anything else with a fixed name on the host: a file or directory
#     outside t.TempDir, a Docker container, volume or network name (the
#     docker provider and the emulators name theirs with random ids), the
#     host's process environment (t.Setenv is per process: each shard is
#     its own process, so it is free).
# The values each test fixes are in its file (…DisplayBase/…PortBase
# constants); every test of this package today has its own, so only tests
# that share one constant must share a shard: replDisplayBase/replPortBase
# (replace_test.go, replace_runtimes_test.go, stores_test.go's
# TestCheckpointsAtRunFailureAndBeforeStop) are all in "rest". A new test
# takes new values (look up the constants with
# `grep -n 'DisplayBase\|PortBase\|VIEW_PORT_BASE' apps/worker/*_test.go`, and
# apps/botd's, whose packages run at the same time as well), or joins the
# shard of the test whose values it reuses. What is not fixed is free: botd
# moves a screen to the next free display and a kernel-picked view port when
# its own is held, the local provider skips a slot whose display or ports
# are held, and local user ids (WORKER_LOCAL_ID_BASE) are claimed per
# worker and checked against the host's users, so two workers never take
# the same uid; but a test should not lean on that.
#
# Three shards, each about a third of the package's time when it runs
# alone (measured with `go test -v`: 794 s in all without the cluster's
# tests; vendors 258 s). "vendors" holds the vendor tests (the E2B, Daytona
# and Box emulators and the docker provider: their desktops run in
# containers, with no X display or fixed host port of their own);
# "cluster" the Kubernetes tests, the warm pools (pool_test.go's tests share
# poolDisplayBase), the worker group and a few long local ones; "rest" the
# others. They run beside the other packages' tests, and in `make test` the
# two cores are busy throughout (the rehearsals' CPU samples): under that
# load a shard takes several times its time alone (rehearsal 29: vendors
# 2,317 s), so the start-up deadlines of the tests are generous. Keep the
# shards few: a flaky suite blocks every landing.

# WORKER_SHARD_NAMES and WORKER_SHARD_TESTS are parallel: a shard's name and
# the space-separated names of its tests.
WORKER_SHARD_NAMES=(
  vendors
  cluster
)
WORKER_SHARD_TESTS=(
  # E2B: templates, desktop acceptance and replace, takeover, sign-ins,
  # the forwarder and model-key red teams; the docker provider's
  # acceptance; Daytona and Box.
  "TestE2BTemplatePerComputer TestAcceptanceE2BDesktop TestTakeoverE2B TestAcceptanceReplaceE2B TestSigninTravelsE2BDesktop TestRedteamForwarder TestRedTeamDesktopModelKey TestAcceptanceReplaceDocker TestTakeoverDaytona TestAcceptanceReplaceDaytona TestAcceptanceDaytonaDesktop TestSigninTravelsDaytonaDesktop TestAcceptanceReplaceBox TestTakeoverBox TestBoxNoEnvThroughWorker"
  # The cluster's tests, the warm pools, the worker group, and three long
  # local tests (each with displays and ports of its own); two vendor tests
  # (the key hunt, which starts an E2B desktop, a Daytona desktop and a Box,
  # and Box's sign-ins), whose sandboxes are containers with nothing fixed,
  # to even the shards out (rehearsal 29: vendors 2,317 s, cluster 1,394 s).
  "TestPoolKubernetes TestPoolLocal TestPoolDocker TestAcceptanceReplaceKubernetes TestKubernetesAPIServerUnreachable TestWorkerGroupKillPartitionRejoin TestWorkerGroupTraceCrossesTheRelay TestWorkerGroupSharesThePool TestWorkerGroupRestoreKeyAnyWorker TestTakeoverAndBotdEvents TestRedteamVaultReveal TestWorkerKilledMidRun TestKeyHuntFindsCanary TestSigninTravelsBox"
)
# The last shard, every other test: local provider, botd started directly,
# the operator socket, the OpenAPI and MCP clients, and any new test.
WORKER_SHARD_REST=rest
# The shard that waits for the Kubernetes test cluster (KUBE_TEST_KUBECONFIG);
# the others start as soon as the image is built.
WORKER_SHARD_CLUSTER=cluster
