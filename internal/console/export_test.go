package console

import "time"

// SetClock has s read the time from now: the sign-in back-off and the
// sessions' expiry.
func SetClock(s *Server, now func() time.Time) { s.now = now }

// SafeBack is safeBack, the check of the page a sign-in returns to.
var SafeBack = safeBack
