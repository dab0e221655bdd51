// Package deploy holds Leasehold's deployment artefacts — the compose
// stack (compose/), Kubernetes manifests (k8s/), Prometheus alert rules
// (prometheus/) and the Grafana dashboard (grafana/) — and the tests that
// keep them honest: every file parses, the structure operators rely on is
// there, the fleet files load, the command lines use flags the binaries
// accept, every metric a dashboard panel or alert rule queries is one the
// real reserver, router and enginesim export, and routers get only the
// router credential: a real reserver and routers started with compose's
// credentials refuse one router's token on another router's lease and on
// every admin method. probe/ is the container
// healthcheck client of the distroless images.
package deploy
