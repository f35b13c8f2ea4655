package secretfile

// SetEUID makes Check judge files for the effective user id uid, as a
// process of that user would, until the returned function restores it: a
// test running as root plays the pod's runAsUser with it.
func SetEUID(uid int) (restore func()) {
	old := geteuid
	geteuid = func() int { return uid }
	return func() { geteuid = old }
}
