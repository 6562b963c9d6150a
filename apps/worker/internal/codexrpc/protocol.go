package codexrpc

import "encoding/json"

// The subset of the app-server protocol the worker uses. Field names are
// taken from `codex app-server generate-json-schema --experimental`;
// schema_test.go checks them against the installed Codex's schema.

// Methods the worker calls or answers.
const (
	MethodInitialize            = "initialize"
	MethodInitialized           = "initialized"
	MethodThreadStart           = "thread/start"
	MethodThreadResume          = "thread/resume"
	MethodTurnStart             = "turn/start"
	MethodTurnInterrupt         = "turn/interrupt"
	MethodToolCall              = "item/tool/call"
	MethodCommandApproval       = "item/commandExecution/requestApproval"
	MethodFileChangeApproval    = "item/fileChange/requestApproval"
	MethodPermissionsApproval   = "item/permissions/requestApproval"
	MethodUserInput             = "item/tool/requestUserInput"
	MethodElicitation           = "mcpServer/elicitation/request"
	MethodApplyPatchApproval    = "applyPatchApproval"
	MethodExecCommandApproval   = "execCommandApproval"
	MethodAuthTokensRefresh     = "account/chatgptAuthTokens/refresh"
	MethodAttestationGenerate   = "attestation/generate"
	NotifyTurnCompleted         = "turn/completed"
	NotifyTurnStarted           = "turn/started"
	NotifyError                 = "error"
	NotifyItemCompleted         = "item/completed"
	NotifyThreadStatusChanged   = "thread/status/changed"
	NotifyAgentMessageDelta     = "item/agentMessage/delta"
	NotifyThreadTokenUsage      = "thread/tokenUsage/updated"
	NotifyAccountRateLimits     = "account/rateLimits/updated"
	NotifyThreadStarted         = "thread/started"
	NotifyItemStarted           = "item/started"
	NotifyWarning               = "warning"
	NotifyConfigWarning         = "configWarning"
	NotifyMcpStartupStatus      = "mcpServer/startupStatus/updated"
	NotifySessionConfigured     = "sessionConfigured"
	NotifyThreadNameUpdated     = "thread/name/updated"
	NotifyDeprecation           = "deprecationNotice"
	NotifyReasoningDelta        = "item/reasoning/textDelta"
	NotifyReasoningSummaryDelta = "item/reasoning/summaryTextDelta"
)

// ClientInfo is InitializeParams.clientInfo.
type ClientInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Title   string `json:"title,omitempty"`
}

// InitializeCapabilities is InitializeParams.capabilities.
type InitializeCapabilities struct {
	ExperimentalAPI bool `json:"experimentalApi"`
}

// InitializeParams is initialize's params.
type InitializeParams struct {
	ClientInfo   ClientInfo             `json:"clientInfo"`
	Capabilities InitializeCapabilities `json:"capabilities"`
}

// DynamicToolSpec is a FunctionDynamicToolSpec.
type DynamicToolSpec struct {
	Type        string          `json:"type"` // "function"
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

// ThreadStartParams is thread/start's params.
type ThreadStartParams struct {
	Model                 string            `json:"model,omitempty"`
	ModelProvider         string            `json:"modelProvider,omitempty"`
	Cwd                   string            `json:"cwd,omitempty"`
	ApprovalPolicy        string            `json:"approvalPolicy,omitempty"`
	Sandbox               string            `json:"sandbox,omitempty"`
	DeveloperInstructions string            `json:"developerInstructions,omitempty"`
	DynamicTools          []DynamicToolSpec `json:"dynamicTools,omitempty"`
	Ephemeral             bool              `json:"ephemeral,omitempty"`
}

// ThreadResumeParams is thread/resume's request: the thread (still loaded in
// the app-server, or read back from its rollout) with the same policy.
type ThreadResumeParams struct {
	ThreadID       string `json:"threadId"`
	ModelProvider  string `json:"modelProvider,omitempty"`
	Cwd            string `json:"cwd,omitempty"`
	ApprovalPolicy string `json:"approvalPolicy,omitempty"`
	Sandbox        string `json:"sandbox,omitempty"`
	ExcludeTurns   bool   `json:"excludeTurns,omitempty"`
}

// ThreadResumeResponse is thread/resume's reply (the part the worker reads).
type ThreadResumeResponse struct {
	Thread Thread `json:"thread"`
}

// Thread is the part of a Thread the worker reads.
type Thread struct {
	ID string `json:"id"`
}

// ThreadStartResponse is thread/start's result.
type ThreadStartResponse struct {
	Thread Thread `json:"thread"`
	Model  string `json:"model"`
}

// UserInput is a TextUserInput.
type UserInput struct {
	Type string `json:"type"` // "text"
	Text string `json:"text"`
}

// TurnStartParams is turn/start's params.
type TurnStartParams struct {
	ThreadID       string      `json:"threadId"`
	Input          []UserInput `json:"input"`
	Model          string      `json:"model,omitempty"`
	ApprovalPolicy string      `json:"approvalPolicy,omitempty"`
}

// TurnError is Turn.error.
type TurnError struct {
	Message string `json:"message"`
}

// Turn is the part of a Turn the worker reads.
type Turn struct {
	ID     string     `json:"id"`
	Status string     `json:"status"` // completed, interrupted, failed, inProgress
	Error  *TurnError `json:"error"`
}

// TurnStartResponse is turn/start's result.
type TurnStartResponse struct {
	Turn Turn `json:"turn"`
}

// TurnCompletedNotification is turn/completed's params.
type TurnCompletedNotification struct {
	ThreadID string `json:"threadId"`
	Turn     Turn   `json:"turn"`
}

// TurnInterruptParams is turn/interrupt's params.
type TurnInterruptParams struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
}

// ErrorNotification is the error notification's params.
type ErrorNotification struct {
	Error     TurnError `json:"error"`
	ThreadID  string    `json:"threadId"`
	TurnID    string    `json:"turnId"`
	WillRetry bool      `json:"willRetry"`
}

// DynamicToolCallParams is item/tool/call's params.
type DynamicToolCallParams struct {
	ThreadID  string          `json:"threadId"`
	TurnID    string          `json:"turnId"`
	CallID    string          `json:"callId"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
}

// ContentItem is a DynamicToolCallOutputContentItem.
type ContentItem struct {
	Type     string `json:"type"` // inputText | inputImage
	Text     string `json:"text,omitempty"`
	ImageURL string `json:"imageUrl,omitempty"`
}

// DynamicToolCallResponse is item/tool/call's result.
type DynamicToolCallResponse struct {
	ContentItems []ContentItem `json:"contentItems"`
	Success      bool          `json:"success"`
}

// ToolRequestUserInputQuestion is one question of item/tool/requestUserInput.
type ToolRequestUserInputQuestion struct {
	ID       string `json:"id"`
	Header   string `json:"header"`
	Question string `json:"question"`
	IsSecret bool   `json:"isSecret"`
}

// ToolRequestUserInputParams is item/tool/requestUserInput's params.
type ToolRequestUserInputParams struct {
	ThreadID  string                         `json:"threadId"`
	TurnID    string                         `json:"turnId"`
	ItemID    string                         `json:"itemId"`
	Questions []ToolRequestUserInputQuestion `json:"questions"`
}

// ToolRequestUserInputAnswer is one answer.
type ToolRequestUserInputAnswer struct {
	Answers []string `json:"answers"`
}

// ToolRequestUserInputResponse answers item/tool/requestUserInput.
type ToolRequestUserInputResponse struct {
	Answers map[string]ToolRequestUserInputAnswer `json:"answers"`
}

// DecisionResponse answers the v2 approval requests
// (commandExecution/fileChange): decision accept|decline|cancel.
type DecisionResponse struct {
	Decision string `json:"decision"`
}

// ReviewDecisionResponse answers the legacy applyPatchApproval and
// execCommandApproval: decision approved|denied|abort.
type ReviewDecisionResponse struct {
	Decision string `json:"decision"`
}

// ElicitationResponse answers mcpServer/elicitation/request.
type ElicitationResponse struct {
	Action string `json:"action"` // accept | decline | cancel
}
