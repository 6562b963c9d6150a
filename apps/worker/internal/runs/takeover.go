package runs

import (
	"strings"

	"github.com/open-bot/computer/apps/worker/internal/codexrpc"
)

// BotRun returns the live run of bot botID on computer computerID, if this
// process has one that has not ended.
func (m *Manager) BotRun(computerID, botID string) (*Run, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.runs {
		if r.computerID == computerID && r.botID == botID && !r.Snapshot().Status.Ended() {
			return r, true
		}
	}
	return nil, false
}

// ScreenRun returns the live run whose bot owns screen on computerID (the
// namespace rule: the screen is the bot id or starts with "<bot-id>-").
// Among bots whose ids are prefixes of one another the longest wins.
func (m *Manager) ScreenRun(computerID, screen string) (*Run, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var best *Run
	for _, r := range m.runs {
		if r.computerID != computerID || r.Snapshot().Status.Ended() {
			continue
		}
		if screen == r.botID || strings.HasPrefix(screen, r.botID+"-") {
			if best == nil || len(r.botID) > len(best.botID) {
				best = r
			}
		}
	}
	return best, best != nil
}

// Note records an event that happened outside the model's turn (botd's
// apply guard, a crashed browser, a preemption, lost egress) on the run:
// stored, and streamed to its subscribers. Nothing is noted on an ended run;
// past MaxBotdNotes the run fails (its botd is flooding it).
func (r *Run) Note(typ string, data any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.snap.Status.Ended() || r.violation != nil {
		return
	}
	if r.notes++; r.notes > MaxBotdNotes {
		r.violateLocked(codexrpc.Limitf("botd's /events reported more than %d events for this run; the cap is %d", MaxBotdNotes, MaxBotdNotes))
		return
	}
	r.emitLocked(typ, data)
}

// ComputerID is the run's computer.
func (r *Run) ComputerID() string { return r.computerID }

// BotID is the run's bot.
func (r *Run) BotID() string { return r.botID }

// ComputerRuns lists the live runs of computerID.
func (m *Manager) ComputerRuns(computerID string) []*Run {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*Run
	for _, r := range m.runs {
		if r.computerID == computerID {
			out = append(out, r)
		}
	}
	return out
}
