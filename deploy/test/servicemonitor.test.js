// The ServiceMonitor in deploy/kubernetes validates against the Prometheus
// Operator's schema (kubernetes-validate has no schema for CRDs), and a
// broken one does not.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { parse } from "yaml";
import { ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";

const file = new URL("../kubernetes/servicemonitor.yaml", import.meta.url);

test("the shipped ServiceMonitor validates", () => {
  const doc = parse(readFileSync(file, "utf8"));
  assert.equal(doc.kind, "ServiceMonitor");
  new ServiceMonitor(doc).validate();
});

test("a ServiceMonitor with a misspelt field does not", () => {
  const doc = parse(readFileSync(file, "utf8"));
  doc.spec.endpoints[0].interval = 15; // must be a duration string
  assert.throws(() => new ServiceMonitor(doc).validate());
});
