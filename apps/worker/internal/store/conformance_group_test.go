package store

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestConformanceGroupFence: a worker group's ownership lease fences every
// computer write made under it, TakeLease moves a run's lease only under a
// live ownership fence, and ListLeases lists by prefix.
func TestConformanceGroupFence(t *testing.T) {
	eachEngine(t, func(t *testing.T, s Store) {
		ctx := t.Context()
		require.NoError(t, s.CreateComputer(ctx, computer("c1")))
		// Held, but already past its end: a fence checks the epoch, and
		// another worker may claim it.
		own, err := s.AcquireLease(ctx, "owner:c1", "w-a", -time.Second)
		require.NoError(t, err)
		fenced := WithFence(ctx, Fence{Key: "owner:c1", Epoch: own.Epoch})

		// Under the live epoch every computer write goes through.
		got, err := s.UpdateComputer(fenced, "c1", StateUpdate{LastError: ptr("first")})
		require.NoError(t, err)
		require.Equal(t, "first", got.LastError)
		require.NoError(t, s.AddBot(fenced, Bot{ComputerID: "c1", ID: "alice"}))
		require.NoError(t, s.PutCheckpoint(fenced, Checkpoint{ComputerID: "c1", Revision: 1, Size: 10}))
		require.NoError(t, s.RemoveBot(fenced, "c1", "alice"))
		replaced, err := s.PutSecret(fenced, Secret{ComputerID: "c1", Name: "TOKEN", Origin: "https://a.example", Value: []byte{1, 2, 3}})
		require.NoError(t, err)
		require.False(t, replaced)
		replaced, err = s.PutSecret(fenced, Secret{ComputerID: "c1", Name: "TOKEN", Origin: "https://a.example", Value: []byte{4, 5, 6}})
		require.NoError(t, err)
		require.True(t, replaced)
		_, err = s.PutSecret(fenced, Secret{ComputerID: "c1", Name: "GONE", Origin: "https://a.example", Value: []byte{7}})
		require.NoError(t, err)
		require.NoError(t, s.DeleteSecret(fenced, "c1", "GONE"))
		require.ErrorIs(t, s.RemoveBot(fenced, "c1", "alice"), ErrNotFound, "a missing bot is still not found under a live fence")
		_, err = s.UpdateComputer(fenced, "nope", StateUpdate{LastError: ptr("x")})
		require.ErrorIs(t, err, ErrNotFound)

		// Another worker takes the computer (the lease ran out): the old
		// owner's writes are refused, and change nothing.
		newOwn, err := s.AcquireLease(ctx, "owner:c1", "w-b", time.Minute)
		require.NoError(t, err)
		require.Greater(t, newOwn.Epoch, own.Epoch)
		_, err = s.UpdateComputer(fenced, "c1", StateUpdate{LastError: ptr("stale")})
		require.ErrorIs(t, err, ErrStaleEpoch)
		require.ErrorIs(t, s.AddBot(fenced, Bot{ComputerID: "c1", ID: "bob"}), ErrStaleEpoch)
		require.ErrorIs(t, s.PutCheckpoint(fenced, Checkpoint{ComputerID: "c1", Revision: 2, Size: 10}), ErrStaleEpoch)
		require.NoError(t, s.AddBot(ctx, Bot{ComputerID: "c1", ID: "carol"}))
		require.ErrorIs(t, s.RemoveBot(fenced, "c1", "carol"), ErrStaleEpoch)
		_, err = s.PutSecret(fenced, Secret{ComputerID: "c1", Name: "TOKEN", Origin: "https://a.example", Value: []byte{9}})
		require.ErrorIs(t, err, ErrStaleEpoch, "a stale owner replaces no secret")
		_, err = s.PutSecret(fenced, Secret{ComputerID: "c1", Name: "NEW", Origin: "https://a.example", Value: []byte{9}})
		require.ErrorIs(t, err, ErrStaleEpoch, "nor adds one")
		require.ErrorIs(t, s.DeleteSecret(fenced, "c1", "TOKEN"), ErrStaleEpoch, "nor deletes one")
		sec, err := s.GetSecret(ctx, "c1", "TOKEN")
		require.NoError(t, err)
		require.Equal(t, []byte{4, 5, 6}, sec.Value, "the secret as the live owner left it")
		_, err = s.GetSecret(ctx, "c1", "NEW")
		require.ErrorIs(t, err, ErrNotFound)
		c, err := s.GetComputer(ctx, "c1")
		require.NoError(t, err)
		require.Equal(t, "first", c.LastError, "a refused write changed nothing")
		bots, err := s.ListBots(ctx, "c1")
		require.NoError(t, err)
		require.Len(t, bots, 1, "only carol, added without a fence")
		cp, err := s.LatestCheckpoint(ctx, "c1")
		require.NoError(t, err)
		require.Equal(t, int64(1), cp.Revision)

		// A run's lease, held by the old owner's run, moves to the new
		// owner only under its live ownership.
		run, err := s.AcquireLease(ctx, "bot:c1:alice", "run-1", time.Minute)
		require.NoError(t, err)
		_, err = s.TakeLease(ctx, "bot:c1:alice", "run-1", time.Minute, "owner:c1", own.Epoch)
		require.ErrorIs(t, err, ErrStaleEpoch, "the old owner cannot take it")
		took, err := s.TakeLease(ctx, "bot:c1:alice", "run-1", time.Minute, "owner:c1", newOwn.Epoch)
		require.NoError(t, err)
		require.Greater(t, took.Epoch, run.Epoch, "held and unexpired, taken all the same, under a new epoch")
		_, err = s.RenewLease(ctx, "bot:c1:alice", run.Epoch, time.Minute)
		require.ErrorIs(t, err, ErrStaleEpoch, "the old run is fenced")

		ls, err := s.ListLeases(ctx, "owner:")
		require.NoError(t, err)
		require.Len(t, ls, 1)
		require.Equal(t, "owner:c1", ls[0].Key)
		require.Equal(t, "w-b", ls[0].Holder)
		_, err = s.AcquireLease(ctx, "owner:c10", "w-a", time.Minute)
		require.NoError(t, err)
		ls, err = s.ListLeases(ctx, "owner:")
		require.NoError(t, err)
		require.Len(t, ls, 2)
		ls, err = s.ListLeases(ctx, "bot:")
		require.NoError(t, err)
		require.Len(t, ls, 1)
	})
}
