package e2b

import "time"

// The envd messages, as the protobuf JSON mapping of the SDK's
// descriptors (process/process.proto, filesystem/filesystem.proto) puts
// them on the wire: lowerCamelCase names, oneofs flattened (a pointer
// field each, one set), bytes as standard base64 ([]byte), enums by name.

type empty struct{}

// process.proto

type processConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args,omitempty"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  *string           `json:"cwd,omitempty"`
}

type ptySize struct {
	Cols uint32 `json:"cols"`
	Rows uint32 `json:"rows"`
}

type pty struct {
	Size *ptySize `json:"size,omitempty"`
}

type startRequest struct {
	Process processConfig `json:"process"`
	Pty     *pty          `json:"pty,omitempty"`
	Tag     *string       `json:"tag,omitempty"`
	Stdin   *bool         `json:"stdin,omitempty"`
}

type processSelector struct {
	Pid *uint32 `json:"pid,omitempty"`
	Tag *string `json:"tag,omitempty"`
}

type processInput struct {
	Stdin []byte `json:"stdin,omitempty"`
	Pty   []byte `json:"pty,omitempty"`
}

type connectRequest struct {
	Process processSelector `json:"process"`
}

type sendInputRequest struct {
	Process processSelector `json:"process"`
	Input   processInput    `json:"input"`
}

type sendSignalRequest struct {
	Process processSelector `json:"process"`
	Signal  string          `json:"signal"` // SIGNAL_SIGKILL, SIGNAL_SIGTERM (or the number)
}

type closeStdinRequest struct {
	Process processSelector `json:"process"`
}

type updateRequest struct {
	Process processSelector `json:"process"`
	Pty     *pty            `json:"pty,omitempty"`
}

type processInfo struct {
	Config processConfig `json:"config"`
	Pid    uint32        `json:"pid"`
	Tag    *string       `json:"tag,omitempty"`
}

type listResponse struct {
	Processes []processInfo `json:"processes"`
}

type startEvent struct {
	Pid uint32 `json:"pid"`
}

type dataEvent struct {
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
	Pty    []byte `json:"pty,omitempty"`
}

type endEvent struct {
	ExitCode int32   `json:"exitCode"`
	Exited   bool    `json:"exited"`
	Status   string  `json:"status"`
	Error    *string `json:"error,omitempty"`
}

type processEvent struct {
	Start     *startEvent `json:"start,omitempty"`
	Data      *dataEvent  `json:"data,omitempty"`
	End       *endEvent   `json:"end,omitempty"`
	Keepalive *empty      `json:"keepalive,omitempty"`
}

// streamEvent is StartResponse and ConnectResponse.
type streamEvent struct {
	Event processEvent `json:"event"`
}

// filesystem.proto

type entryInfo struct {
	Name          string     `json:"name"`
	Type          string     `json:"type"` // FILE_TYPE_FILE, FILE_TYPE_DIRECTORY, FILE_TYPE_SYMLINK
	Path          string     `json:"path"`
	Size          int64      `json:"size"`
	Mode          uint32     `json:"mode"`
	Permissions   string     `json:"permissions"`
	Owner         string     `json:"owner"`
	Group         string     `json:"group"`
	ModifiedTime  *time.Time `json:"modifiedTime,omitempty"`
	SymlinkTarget *string    `json:"symlinkTarget,omitempty"`
}

type pathRequest struct {
	Path string `json:"path"`
}

type listDirRequest struct {
	Path  string `json:"path"`
	Depth uint32 `json:"depth"`
}

type moveRequest struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

type entryResponse struct {
	Entry *entryInfo `json:"entry,omitempty"`
}

type listDirResponse struct {
	Entries []entryInfo `json:"entries"`
}

// watchDirRequest is WatchDirRequest and CreateWatcherRequest
// (allowNetworkMounts is accepted and has no effect: the guest's mounts
// are all watched alike).
type watchDirRequest struct {
	Path               string `json:"path"`
	Recursive          bool   `json:"recursive"`
	IncludeEntry       bool   `json:"includeEntry"`
	AllowNetworkMounts bool   `json:"allowNetworkMounts"`
}

type createWatcherResponse struct {
	WatcherID string `json:"watcherId"`
}

// watcherRequest is GetWatcherEventsRequest and RemoveWatcherRequest.
type watcherRequest struct {
	WatcherID string `json:"watcherId"`
}

type watcherEventsResponse struct {
	Events []filesystemEvent `json:"events"`
}

type filesystemEvent struct {
	Name  string     `json:"name"`
	Type  string     `json:"type"` // EVENT_TYPE_CREATE, ...
	Entry *entryInfo `json:"entry,omitempty"`
}

// watchEvent is WatchDirResponse, whose oneof is the message's own, so
// flattened into it: {"start":{}}, {"filesystem":{...}}, {"keepalive":{}}
// (not inside an "event" field as StartResponse's ProcessEvent is).
type watchEvent struct {
	Start      *empty           `json:"start,omitempty"`
	Filesystem *filesystemEvent `json:"filesystem,omitempty"`
	Keepalive  *empty           `json:"keepalive,omitempty"`
}
