"""How a Kubernetes training Job reaches gpufair's admission and placement.

A Job's pods are created with gpufair's scheduling gate, so the default
scheduler leaves them alone. The scheduler's leader reads Nodes and Pods,
decides with the policy core which gated jobs start and on which nodes
(`admit.decide`, pure, on the API's JSON), pins each pod to its node with
required node affinity and lifts the gate in one patch; the default
scheduler then binds it there, and its trainer registers over gRPC.

Pure core: `objects` (API JSON -> views), `fit` (node rules), `gangs`
(gated pods -> jobs), `patch` (JSON Patches), `admit` (the round). I/O:
`api` (the official `kubernetes` client, and the calls it makes: the
scheduler's RBAC) and `controller` (the leader's loop). Importing this
package loads neither the Kubernetes client nor etcd.
"""
