package cookies

// Reload replaces the jar with what is on disk now: after a workspace import
// wrote a new cookies.json, so the next round copies its sign-ins into the
// browsers instead of overwriting the file with the old jar. What each
// browser held at the last round is forgotten, so nothing they hold is
// mistaken for a sign-out. Browsers are quiesced during an import, so
// normally none is registered.
func (s *Sync) Reload() error {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	jar, tombs, err := readJar(s.path)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.jar, s.tombs = jar, tombs
	for st := range s.last {
		delete(s.last, st)
	}
	s.mu.Unlock()
	s.log.Info().Int("cookies", len(jar)).Msg("cookie jar reloaded")
	return nil
}
