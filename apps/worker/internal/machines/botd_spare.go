package machines

import "context"

// PrepareSpareScreen has botd start a screen's stack under no id, which the
// next screen to start takes (the warm pool's pooled machines: their bots
// are not known yet). Not part of Machine: only a botd machine has it.
func (b *Botd) PrepareSpareScreen(ctx context.Context) error {
	return b.c.PrepareSpareScreen(ctx)
}
