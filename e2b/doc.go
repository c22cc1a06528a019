// Package e2b is sandfs's E2B adapter: one HTTP handler that serves the
// E2B REST API (sandboxes: create, list, info, kill, timeout, pause,
// connect) and, on the same port, the in-sandbox daemon's protocol
// (envd: the Connect-RPC services process.Process and
// filesystem.Filesystem, HTTP /files and /health), so that the
// unmodified E2B SDKs drive sandfs. Requests that carry an
// E2b-Sandbox-Id header are envd traffic for that sandbox; the others
// are REST (see ../shared/reference/e2b-protocol.md).
//
// Each handler is a short sequence of file operations on the sandfs tree
// through package fs/client, the client a 9P user has: `new` on /ctl,
// verbs on sandboxes/<id>/ctl, status lines, procs/clone and
// procs/<n>/{ctl,stdin,stdout,stderr,wait}, the guest's files under
// sandboxes/<id>/fs/ and its watch file sandboxes/<id>/watch. The
// adapter holds no sandbox logic; what it keeps itself is what only E2B
// has: per sandbox the API key that made it, its metadata, its envVars
// and its envd access token (Registry, saved in one JSON file); and, in
// memory, what E2B's calls need between requests: code contexts
// (interps.go), polling watchers (watchers.go) and metrics samples
// (samples.go), each bounded.
//
// Access: every REST request needs an API key (X-API-KEY); a key maps to
// an explicit tree identity (cred.Cred), and the adapter reaches the
// tree as that identity (Config.Dial), so the tree's access model holds.
// On top of it the adapter scopes by key itself, whatever the identity
// (several keys may act as one uid, or as root): a key sees and touches
// only the sandboxes it made and the snapshots it took (Registry).
// envd requests need the sandbox's access token (X-Access-Token), issued
// at create.
//
// The Connect services are served with connect-go and a JSON codec over
// plain Go structs (messages.go) instead of generated protobuf types:
// the SDK speaks the Connect protocol with JSON only, and the structs
// follow the protobuf JSON mapping of the SDK's own descriptors.
package e2b
