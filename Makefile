# amlhpc — provision AzureML GPU clusters for HPC-scale training and run CosmoFlow.
#   make run    bootstrap, then ansible-playbook site.yml on the embedded local default
#   make test   bootstrap, then every test tier
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

VENV      := .venv
ANSIBLE   := $(VENV)/bin
PYTEST    := $(VENV)/bin/python -m pytest
LINTBIN   := .venv-lint/bin
export PATH := $(CURDIR)/$(VENV)/bin:$(CURDIR)/.tools/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PYTHONDONTWRITEBYTECODE := 1
# A broken inventory fails instead of warning (CI and tests alike).
export ANSIBLE_INVENTORY_UNPARSED_FAILED := true

MOLECULE_SCENARIOS ?= $(sort $(notdir $(patsubst %/molecule.yml,%,$(wildcard molecule/*/molecule.yml))))

.PHONY: help setup setup-test run teardown test test-unit lint test-sanity test-collection \
        test-oldest-core test-ansible-units test-ansible-integration test-integration test-molecule test-vm test-workload test-ee soak bench clean image \
        forget-pins

help:  ## Show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

setup:  ## Bootstrap .venv (python3.12), the workload env and the node tools; quick when done
	@.ci/bootstrap venv
	@.ci/bootstrap workload
	@.ci/bootstrap node

setup-test: setup  ## setup + lint env + system parts the tests need (installs them as root)
	@.ci/bootstrap lint
	@.ci/sysdeps

run: setup  ## Run site.yml on the embedded local default (inventory/local/)
	$(ANSIBLE)/ansible-playbook site.yml $(ARGS)

teardown: setup  ## Undo a run (playbooks/teardown.yml)
	$(ANSIBLE)/ansible-playbook playbooks/teardown.yml $(ARGS)

# make test: the unit and workload tiers alone (their session check fails a test that writes the
# checkout's outputs/ or .cache/; beside the others the workload tier took twice its time and made
# the second lane the longer), the collection's alone (galaxy-importer gives ansible-lint 180 s,
# which it ran past beside the others), then two lanes side by side: the integration tier (its
# session check too: every test runs in a project folder of its own), beside the tiers that use a
# core at a time or wait on containers and a VM, none of which writes the checkout's outputs/ or
# .cache/ (the oldest core's local default and the VM's playbooks run in project copies, ansible-test
# units in its copy, molecule in its scenarios' folders: make test-molecule fails where it does;
# tests/conftest.py WATCHED_TIERS). The system packages, then the venvs, the node tools and the two
# images every tier shares are made first, side by side (.ci/bootstrap parallel), so that no two
# tiers make them at once. Times: docs/testing.md.
test:  ## Every test tier, each timed (.ci/tiers): unit, workload, collection, then integration beside oldest core, lint, sanity, ansible-test units, ansible-test integration, molecule, vm
	@.ci/sysdeps
	@.ci/bootstrap parallel
	.ci/tiers test-unit test-workload test-collection \
	  "test-integration | test-oldest-core lint test-sanity test-ansible-units test-ansible-integration test-molecule test-vm"

test-unit: setup  ## pytest tests/unit, on every core (pytest-xdist)
	$(PYTEST) -n auto --durations=20 tests/unit

test-workload: setup  ## pytest tests/workload with the workload venv (torch CPU)
	.venv-workload/bin/python -m pytest tests/workload

lint: setup  ## public Ansible APIs only in plugins/ + ansible-lint (production profile) + yamllint + antsibull-changelog (fragments, CHANGELOG.md)
	@.ci/bootstrap lint
	$(VENV)/bin/python .ci/public-apis plugins
	$(LINTBIN)/yamllint --strict .
	ANSIBLE_CACHE_PLUGIN=memory ANSIBLE_COLLECTIONS_PATH=$(CURDIR)/.cache/collections $(LINTBIN)/ansible-lint --profile production
	.ci/changelog

test-sanity: setup  ## ansible-test sanity, every test, Python 3.12, on the collection amlhpc.azureml
	@.ci/sysdeps sanity
	@.ci/bootstrap sanity
	.ci/sanity

test-oldest-core: setup  ## ansible-core 2.18, the oldest supported (.venv-core218): the local default, the version-sensitive sanity tests; 2.17 refused (its unit run: test-ansible-units)
	@.ci/sysdeps sanity
	@.ci/bootstrap core218
	@.ci/bootstrap core217
	.ci/oldest-core

test-ansible-units: setup  ## ansible-test units on ansible-core 2.18, the oldest supported, and requirements.txt's lower bounds (tests/unit/constraints.txt): tests/unit as a collection's CI runs them (its venv, its three contexts)
	@.ci/bootstrap sanity
	@.ci/bootstrap core218
	.ci/units

test-ansible-integration: setup  ## ansible-test integration: the targets in tests/integration/targets, on this machine
	.ci/integration

test-collection: setup  ## Build the collection, install the tarball, run the local default from it; galaxy-importer, antsibull-docs; EE context; one environment with azure.azcollection (pip over PyPI)
	@.ci/sysdeps node
	@.ci/bootstrap lint
	$(PYTEST) tests/collection

test-ee: setup  ## Opt-in: build the execution environment for real (ansible-builder, docker) and run in it
	@.ci/sysdeps docker node
	$(PYTEST) tests/ee

test-integration: setup image  ## Azurite + the real azcopy on 127.0.0.1, and the playbooks end to end: two files at a time, then those that run alone (tests/integration/conftest.py)
	@.ci/sysdeps node docker
	$(PYTEST) -n 2 --dist loadfile -m "not alone" --durations=30 tests/integration
	$(PYTEST) -m alone --durations=10 tests/integration

soak: setup  ## Repetitions kept out of CI: ten healthy twin pair gates in a row under load (docs/testing.md "Soak")
	@.ci/sysdeps node docker
	AMLHPC_SOAK=1 $(PYTEST) tests/integration/test_twin_pair_gate_rounds.py

image:  ## Build (or reuse) the Debian bookworm test image
	@.ci/sysdeps docker
	@tests/images/build-bookworm.sh

test-molecule: setup image  ## Molecule scenarios on Docker containers (every molecule/*/), which leave the checkout's outputs/ and .cache/ as they were
	@$(VENV)/bin/python .ci/checkout-unchanged --name 'make test-molecule' bash -c 'for s in $(MOLECULE_SCENARIOS); do \
	  echo "=== molecule test -s $$s"; \
	  AMLHPC_TEST_IMAGE=$$(tests/images/build-bookworm.sh) $(VENV)/bin/molecule test -s $$s || exit 1; \
	done'

test-vm: setup  ## nvme_raid for real: a qemu VM (TCG) with 8 emulated NVMe disks
	@.ci/sysdeps vm
	$(PYTEST) tests/vm

bench: setup  ## Benchmarks under bench/ (print numbers); parallel-ssh and mitogen from requirements-bench.txt
	@$(VENV)/bin/python -m pip install -q -r requirements-bench.txt
	@for b in bench/*_bench.py bench/shard_imbalance.py; do echo "=== $$b"; $(VENV)/bin/python $$b || exit 1; done

# The nodes' host key pins (ansible.cfg's known_hosts_file): security state, not a cache.
PINS ?= state/known_hosts

clean:  ## Remove venvs, tools and caches (never the host key pins in state/)
	rm -rf .venv .venv-lint .venv-workload .venv-bench .venv-core218 .venv-core217 .tools .cache .scratch

forget-pins:  ## Forget every node's pinned host keys (PINS=state/known_hosts), a copy kept in state/backup/<time>/ first
	@if [[ ! -e "$(PINS)" && ! -e "$(PINS).nodes.json" ]]; then echo "no pins in $(PINS).nodes.json: nothing to forget"; exit 0; fi; \
	flock "$(PINS).lock" bash -euo pipefail -c ' \
	  files=(); for f in "$(PINS)" "$(PINS).nodes.json"; do [[ -e $$f ]] && files+=("$$f"); done; \
	  if (( $${#files[@]} == 0 )); then echo "no pins in $(PINS).nodes.json: nothing to forget"; exit 0; fi; \
	  backup="$$(dirname "$(PINS)")/backup/$$(date -u +%Y%m%dT%H%M%SZ)"; \
	  mkdir -p -m 0700 "$$backup"; cp -p "$${files[@]}" "$$backup/"; rm -f "$${files[@]}"; \
	  echo "forgot the host key pins of $(PINS).nodes.json, a copy kept in $$backup; the next run trusts each node on first use, naming it in a warning"'
