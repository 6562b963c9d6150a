package shared

// Screen recordings: a screen's display captured to an H.264 video in a
// fragmented MP4 (botd's /screens/{id}/recordings routes, the worker's
// /v1/bots/{id}/recordings and a run's `record: true`).

// Recording error codes.
const (
	// CodeRecordingNotFound is an unknown recording id.
	CodeRecordingNotFound Code = "recording_not_found"
	// CodeRecordingRunning is a start while the screen already records.
	CodeRecordingRunning Code = "recording_running"
	// CodeRecordingEnded is a stop of a recording that already ended (at
	// its cap, on a full disk, or when its screen went away); the message
	// says why.
	CodeRecordingEnded Code = "recording_ended"
	// CodeDiskFull is a recording refused or ended because the disk that
	// holds it is full.
	CodeDiskFull Code = "disk_full"
)

// Why a recording ended (Recording.StopReason).
const (
	RecordingStopRequested   = "requested"
	RecordingStopMaxSeconds  = "max_seconds"
	RecordingStopMaxBytes    = "max_bytes"
	RecordingStopDiskFull    = "disk_full"
	RecordingStopScreenGone  = "screen_gone"
	RecordingStopFailed      = "failed"
	RecordingStateRecording  = "recording"
	RecordingStateStopped    = "stopped"
	RecordingMediaType       = "video/mp4"
	RecordingCodec           = "h264"
	RecordingDefaultFPS      = 8
	RecordingMaxFPS          = 30
	RecordingMaxSecondsCap   = 4 * 3600
	RecordingDefaultSeconds  = 3600
	RecordingMaxBytesCap     = 2 << 30
	RecordingDefaultMaxBytes = 512 << 20
	// RecordingMinBytes is the smallest size cap a recording takes.
	RecordingMinBytes = 256 << 10
)

// Recording is one recording of a screen.
type Recording struct {
	ID     string `json:"id"`
	Screen string `json:"screen"`
	// State is "recording" or "stopped".
	State string `json:"state"`
	// StopReason says why a stopped recording ended: requested,
	// max_seconds, max_bytes, disk_full, screen_gone or failed.
	StopReason string `json:"stopReason,omitempty"`
	// Error is what went wrong when the reason is failed or disk_full.
	Error     string `json:"error,omitempty"`
	StartedAt string `json:"startedAt"`
	EndedAt   string `json:"endedAt,omitempty"`
	// Seconds is how long it recorded (so far).
	Seconds    float64 `json:"seconds"`
	Bytes      int64   `json:"bytes"`
	FPS        int     `json:"fps"`
	MaxSeconds int     `json:"maxSeconds"`
	MaxBytes   int64   `json:"maxBytes"`
	Codec      string  `json:"codec"`
	MediaType  string  `json:"mediaType"`
}

// Recordings is a screen's recordings, oldest first.
type Recordings struct {
	Recordings []Recording `json:"recordings"`
}

// RecordingStart is the body that starts a recording; zero fields take
// the defaults, and values above the server's caps are refused.
type RecordingStart struct {
	LeaseID    string `json:"leaseId,omitempty"`
	FPS        int    `json:"fps,omitempty"`
	MaxSeconds int    `json:"maxSeconds,omitempty"`
	MaxBytes   int64  `json:"maxBytes,omitempty"`
}
