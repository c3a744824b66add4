// Every pod the Kubernetes manifests in deploy/kubernetes run passes the
// Pod Security Standards' "restricted" profile (the controls of the
// baseline and restricted levels, as the Kubernetes documentation lists
// them), and a pod that breaks one control does not.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";

const manifests = ["../kubernetes/provd.yaml", "../kubernetes/fleet/provd-fleet.yaml"];

const ALLOWED_VOLUMES = new Set([
  "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret",
]);

/** The pod specs of a manifest's workloads, with where they came from. */
function pods(path) {
  const docs = parseAllDocuments(readFileSync(new URL(path, import.meta.url), "utf8")).map((d) => d.toJS());
  return docs
    .filter((d) => d && ["Deployment", "StatefulSet", "DaemonSet", "Job", "Pod"].includes(d.kind))
    .map((d) => ({ name: `${path} ${d.kind}/${d.metadata.name}`, spec: d.kind === "Pod" ? d.spec : d.spec.template.spec }));
}

/** The restricted profile's violations of one pod spec (empty: it passes). */
export function violations(spec) {
  const out = [];
  const pod = spec.securityContext ?? {};
  for (const host of ["hostNetwork", "hostPID", "hostIPC"]) if (spec[host]) out.push(`${host} is set`);
  for (const v of spec.volumes ?? []) {
    const type = Object.keys(v).find((k) => k !== "name");
    if (!ALLOWED_VOLUMES.has(type)) out.push(`volume ${v.name} is a ${type}`);
  }
  const containers = [...(spec.initContainers ?? []), ...spec.containers, ...(spec.ephemeralContainers ?? [])];
  for (const c of containers) {
    const sc = c.securityContext ?? {};
    const name = `container ${c.name}`;
    if (sc.privileged) out.push(`${name} is privileged`);
    if (sc.allowPrivilegeEscalation !== false) out.push(`${name}: allowPrivilegeEscalation is not false`);
    if ((sc.runAsNonRoot ?? pod.runAsNonRoot) !== true) out.push(`${name}: runAsNonRoot is not true`);
    if ((sc.runAsUser ?? pod.runAsUser) === 0) out.push(`${name} runs as user 0`);
    const seccomp = (sc.seccompProfile ?? pod.seccompProfile)?.type;
    if (!["RuntimeDefault", "Localhost"].includes(seccomp)) out.push(`${name}: seccompProfile is ${seccomp}`);
    const caps = sc.capabilities ?? {};
    if (!(caps.drop ?? []).includes("ALL")) out.push(`${name} does not drop ALL capabilities`);
    for (const add of caps.add ?? []) if (add !== "NET_BIND_SERVICE") out.push(`${name} adds ${add}`);
    for (const p of c.ports ?? []) if (p.hostPort) out.push(`${name} uses hostPort ${p.hostPort}`);
    if (sc.procMount && sc.procMount !== "Default") out.push(`${name}: procMount ${sc.procMount}`);
  }
  return out;
}

for (const path of manifests) {
  for (const { name, spec } of pods(path)) {
    test(`${name} passes Pod Security "restricted"`, () => {
      assert.deepEqual(violations(spec), []);
    });
  }
}

test("a pod that breaks a control is caught", () => {
  const { spec } = pods(manifests[0])[0];
  const broken = structuredClone(spec);
  broken.containers[0].securityContext.allowPrivilegeEscalation = true;
  broken.volumes.push({ name: "host", hostPath: { path: "/" } });
  delete broken.securityContext.seccompProfile;
  const found = violations(broken);
  assert.equal(found.length, 3, found.join("; "));
});
