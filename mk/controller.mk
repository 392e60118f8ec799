# Controller targets, included by the top-level Makefile (`-include mk/*.mk`).
.PHONY: run e2e-controller bench-controller

## Run the controller against the cluster in KUBECONFIG (extra flags: make run RUN_ARGS="--namespace demo").
run:
	$(CARGO) run -- controller $(RUN_ARGS)

## Only the story suite: chart, controller replicas, gate, failover (prints SKIP without a cluster).
e2e-controller:
	bash tests/e2e/run.sh story

## Reconcile CPU time, writes per reconcile and RSS per cached Agent.
bench-controller:
	$(CARGO) bench --bench controller
