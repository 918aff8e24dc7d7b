# Entry points. `make test` is the whole suite (what CI runs); `make tune` the main job on the
# GPU-less default (a simulated node in a systemd container).
SHELL := /bin/bash
VENV := .venv
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
SCENARIO ?= default

.PHONY: help test venv testbed unit lint sanity molecule gpu-check tune sim-node-up sim-node-down clean

help:  ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

test:  ## the whole suite: pytest, ansible-lint, ansible-test sanity, all molecule scenarios
	bash tools/run_tests.sh

venv:  ## controller venv (.venv) from requirements-dev.txt
	bash tools/venv.sh

testbed:  ## docker engine + node image (debootstrap, cached by recipe hash)
	bash tools/testbed.sh

unit: venv  ## pytest only (unit, contract, integration)
	STAGES=pytest bash tools/run_tests.sh

lint: venv  ## ansible-lint, production profile
	STAGES=lint bash tools/run_tests.sh

sanity: venv  ## ansible-test sanity on a mirror of the checkout
	STAGES=sanity bash tools/run_tests.sh

molecule: venv  ## one molecule scenario: make molecule SCENARIO=service
	STAGES=molecule SCENARIOS="$(SCENARIO)" bash tools/run_tests.sh

gpu-check:  ## on a real GPU node: gpu_info + gpu_reset against the driver (tests/gpu/README.md)
	bash tests/gpu/run_gpu_check.sh

tune: venv  ## the main job against a simulated node: tune MTP steps, leave a report in results/
	bash tools/sim_node.sh up
	ANSIBLE_COLLECTIONS_PATH=$$(bash tools/collection_link.sh) \
	  ansible-playbook playbooks/tune_mtp.yml -i inventories/sim $(ARGS)

sim-node-up:  ## start the simulated node container used by `make tune`
	bash tools/sim_node.sh up

sim-node-down:  ## remove it
	bash tools/sim_node.sh down

clean:  ## remove build outputs (keeps .venv and the node image)
	rm -rf build tests/output
