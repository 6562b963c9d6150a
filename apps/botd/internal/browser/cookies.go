package browser

import (
	"context"
	"fmt"

	cdpapi "github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/storage"
)

// ID is the screen id this browser belongs to.
func (b *Browser) ID() string { return b.o.ID }

// GetCookies reads every cookie of the browser's profile.
func (b *Browser) GetCookies(ctx context.Context) ([]*network.Cookie, error) {
	if err := b.alive(); err != nil {
		return nil, err
	}
	res, err := cdpapi.Call(ctx, b.conn.Browser(), storage.GetCookies, storage.GetCookiesParams{})
	if err != nil {
		return nil, fmt.Errorf("get cookies: %w", b.wrap(err))
	}
	return res.Cookies, nil
}

// SetCookies writes cookies into the browser's profile. A cookie whose
// expiry is in the past deletes the stored cookie with the same name,
// domain and path, which is how CookieSync copies a sign-out.
func (b *Browser) SetCookies(ctx context.Context, cookies []*network.CookieParam) error {
	if len(cookies) == 0 {
		return nil
	}
	if err := b.alive(); err != nil {
		return err
	}
	if _, err := cdpapi.Call(ctx, b.conn.Browser(), storage.SetCookies, storage.SetCookiesParams{Cookies: cookies}); err != nil {
		return fmt.Errorf("set cookies: %w", b.wrap(err))
	}
	return nil
}
