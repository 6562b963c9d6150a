package shared

// CodeReplyTooLarge: a machine's answer was larger than the cap the worker
// reads for that kind of call (pkg/shared/client's Limits); the worker read
// no further and closed the connection. The message names the cap.
const CodeReplyTooLarge Code = "reply_too_large"
