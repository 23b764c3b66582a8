# The two commands a developer needs: `make demo` and `make test`. Both set themselves up.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
PYTEST_ARGS ?=

.PHONY: all venv lint test test-k8s-1.36 test-k8s-1.38 unit demo demo-down bench clean k8s-binaries helm chart-crds dashboard-tools dashboard-assets prereqs image

all: test

# pip says what it fetches, one line a package; its progress bars only on a terminal (in a CI log each bar's
# redraws would be lines of their own).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@echo "==> installing paralleljob with its test, simulator, Kubernetes, agent and web-view dependencies into $(VENV)"
	@echo "    (pip: a minute or two the first time; again whenever pyproject.toml changes)"
	bar=$$(test -t 1 && echo on || echo off); \
	  $(BIN)/pip install --disable-pip-version-check --progress-bar $$bar -e '.[test,sim,k8s,agent,dashboard]'
	rm -f $(VENV)/.installed-*
	touch $@

venv: $(STAMP)

lint: venv
	$(BIN)/ruff check operator tests deploy/examples
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: venv
	$(BIN)/pytest tests/unit tests/property $(PYTEST_ARGS)

# etcd, kube-apiserver, kube-controller-manager and kwok for the e2e tests: reused from
# ~/.cache/paralleljob/k8s/<versions>/, or built with Go from deploy/devcluster/ (a cold build takes about
# ten minutes on 2 quiet cores, 20 on busy ones); and JobSet's and Kueue's controller managers for their e2e
# tests, each cached apart in ~/.cache/paralleljob/k8s/<name>-<version>/ (JobSet: 5 to 13 more cold minutes;
# Kueue: see docs/benchmarks.md).
k8s-binaries: venv
	@echo "==> dev-cluster binaries (cached per version; built with Go if missing)"
	$(BIN)/paralleljob dev-cluster build

# helm for the chart's tests: reused from ~/.cache/paralleljob/tools/helm-<version>/, or built with
# `go install` from the Go module proxy (a cold build takes a few minutes on 2 cores).
helm: venv
	@echo "==> helm (cached per version; built with Go if missing)"
	$(BIN)/python -m paralleljob.packaging.helm

# What real (kubelet) nodes and `make image` need: containerd, runc, the CNI plugins, socat, iptables,
# buildah, mmdebstrap (apt-get, as root; a no-op once installed). Without root or a kernel feature it says
# what is missing and the real-node e2e tests skip with that reason, so `make test` goes on (the `-`).
prereqs: venv
	@echo "==> real-node prerequisites (apt-get as root; skipped tests say why if this cannot run)"
	-$(BIN)/paralleljob dev-cluster prereqs

# The operator image from the unchanged Dockerfile and the real-node tests' worker image, without a Docker
# engine: a Debian base made by mmdebstrap, buildah with runc; docker-archives cached per input hash in
# ~/.cache/paralleljob/images/ (load one with `paralleljob dev-cluster load-image ARCHIVE`).
image: prereqs
	$(BIN)/python -m paralleljob.packaging.image

# Refresh the chart's copy of crds/ (a test fails while they differ).
chart-crds: venv
	$(BIN)/python -m paralleljob.packaging.chart

# Chromium + chromedriver and Prometheus + promtool from Debian's packages (apt-get) for the web view's and the
# dashboards' e2e tests; where they cannot be installed those tests skip and say why.
dashboard-tools: venv
	-$(BIN)/python -m paralleljob.devtools.systools

# The web view's d3, vendored from the npm registry (pinned version and integrity; needs npm). The built file
# is committed, so installing the package never needs Node.
dashboard-assets: venv
	$(BIN)/python -m paralleljob.devtools.vendor

test: lint k8s-binaries helm dashboard-tools prereqs
	$(BIN)/pytest $(PYTEST_ARGS)

# The older supported Kubernetes minor (docs/devcluster.md "Kubernetes versions"): its own binaries, cached
# apart from the default's, and the e2e suites whose behaviour depends on the minor (Kubernetes' gang API, DRA
# and its device taints, pod groups, JobSet). Not part of `make test`: its cold build would double that path.
test-k8s-1.36: lint
	PARALLELJOB_KUBERNETES=1.36 $(BIN)/paralleljob dev-cluster build
	PARALLELJOB_KUBERNETES=1.36 $(BIN)/pytest tests/e2e/test_devcluster_smoke.py \
	  tests/e2e/operator_e2e/test_operator_native_podgroups.py tests/e2e/operator_e2e/test_operator_pod_groups.py \
	  tests/e2e/operator_e2e/test_operator_jobset.py tests/e2e/dra_e2e $(PYTEST_ARGS)

# The next Kubernetes minor, 1.38 (v1.38.0-beta.0: docs/devcluster.md "Kubernetes versions"): its own binaries,
# built with Go 1.27 (the build sets GOTOOLCHAIN=go1.27.3 for that module alone; the go command fetches that
# toolchain from the Go module proxy once), and the suites of its gang API: Kubernetes' PodGroups and the
# CompositePodGroups only 1.38 serves. Not part of `make test`.
test-k8s-1.38: lint
	PARALLELJOB_KUBERNETES=1.38 $(BIN)/paralleljob dev-cluster build
	PARALLELJOB_KUBERNETES=1.38 $(BIN)/pytest tests/e2e/test_devcluster_smoke.py \
	  tests/e2e/operator_e2e/test_operator_native_podgroups.py \
	  tests/e2e/operator_e2e/test_operator_composite_podgroups.py $(PYTEST_ARGS)

demo: venv k8s-binaries
	$(BIN)/paralleljob demo-cluster

demo-down: venv
	$(BIN)/paralleljob demo-cluster --down

bench: venv
	$(BIN)/paralleljob bench placement

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
