package mockmodel

// Takeover is the takeover flows' script for bot: it keeps the bot busy
// until bots/BOT/go exists (a shell that waits for it, up to two
// minutes), then asks a person to take the screen and looks at it again
// once it has it back, and ends with "done".
func Takeover(bot string) Script {
	path := "bots/" + bot + "/go"
	steps := []Step{
		{Tool: "shell", Args: map[string]any{"argv": []string{"sh", "-c",
			"i=0; while [ ! -e " + path + " ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done; echo waited"}, "timeoutMs": 180000}},
		{Tool: "request_takeover", Args: map[string]any{"reason": "please sign in for me"}},
		{Tool: "computer_observe", Args: map[string]any{}},
	}
	return func(outs []Output) Step {
		if len(outs) < len(steps) {
			return steps[len(outs)]
		}
		return Step{Message: "done"}
	}
}
