package providers

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestEnsureUnknownKind(t *testing.T) {
	_, err := Ensure(context.Background(), Registry{}, "e2b", "", "", Spec{}, nil)
	require.ErrorIs(t, err, ErrUnknownKind)
	require.ErrorContains(t, err, `"e2b"`)
}

// The replacement path on real machines: a gone machine and a changed kind
// both make a new machine, restored before first use; a live one is reused.
func TestEnsureReplacement(t *testing.T) {
	l := testLocal(t)
	single, err := NewSingleScreen(l, filepath.Join(tmpRoot, "ensure-single"))
	require.NoError(t, err)
	reg := Registry{KindLocal: l, KindSingleScreen: single}
	ctx := testCtx(t, 10*time.Minute)
	spec := Spec{ComputerID: "ensure", BotdToken: testToken()}
	var refs []string
	t.Cleanup(func() {
		for _, r := range refs {
			_ = l.Destroy(context.Background(), r)
		}
	})

	// No machine yet: a fresh one, and no restore without a hook.
	e, err := Ensure(ctx, reg, KindLocal, "", "", spec, nil)
	require.NoError(t, err)
	refs = append(refs, e.Ref)
	require.True(t, e.Replaced)
	require.NoError(t, e.Machine.WriteFile(ctx, "mark.txt", []byte("first")))

	// Same kind, machine alive: the same machine comes back, no restore.
	restored := 0
	restore := func(ctx context.Context, m Machine) error {
		restored++
		// Stands in for the homes issue's checkpoint import: the tar goes
		// through botd's real /workspace/import before anything else runs.
		importWorkspace(t, ctx, m, map[string]string{"bot/restored.txt": "from checkpoint"})
		return nil
	}
	again, err := Ensure(ctx, reg, KindLocal, KindLocal, e.Ref, spec, restore)
	require.NoError(t, err)
	require.False(t, again.Replaced)
	require.Equal(t, e.Ref, again.Ref)
	require.Zero(t, restored)
	got, err := again.Machine.ReadFile(ctx, "mark.txt", 100)
	require.NoError(t, err)
	require.Equal(t, "first", string(got))

	// The machine is gone behind the worker's back: a replacement, restored.
	require.NoError(t, l.Destroy(ctx, e.Ref))
	r, err := Ensure(ctx, reg, KindLocal, KindLocal, e.Ref, spec, restore)
	require.NoError(t, err)
	refs = append(refs, r.Ref)
	require.True(t, r.Replaced)
	require.NotEqual(t, e.Ref, r.Ref)
	require.Equal(t, 1, restored)
	got, err = r.Machine.ReadFile(ctx, "restored.txt", 100)
	require.NoError(t, err)
	require.Equal(t, "from checkpoint", string(got))
	_, err = r.Machine.ReadFile(ctx, "mark.txt", 100)
	require.Error(t, err, "a replacement is a new machine")

	// A changed kind: the old ref never reaches the new kind's provider.
	k, err := Ensure(ctx, reg, KindSingleScreen, KindLocal, r.Ref, spec, restore)
	require.NoError(t, err)
	refs = append(refs, k.Ref)
	require.True(t, k.Replaced)
	require.NotEqual(t, r.Ref, k.Ref)
	require.Equal(t, 2, restored)
	_, err = l.Reconnect(ctx, r.Ref, spec)
	require.NoError(t, err, "the machine of the old kind is left to the caller")

	// A restore that fails leaves no half-made machine behind.
	before, err := l.List(ctx)
	require.NoError(t, err)
	_, err = Ensure(ctx, reg, KindLocal, "", "", spec, func(context.Context, Machine) error { return errors.New("no checkpoint store") })
	require.ErrorContains(t, err, "no checkpoint store")
	after, err := l.List(ctx)
	require.NoError(t, err)
	require.Len(t, after, len(before))
}
