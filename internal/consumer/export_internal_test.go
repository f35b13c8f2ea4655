package consumer

// ResolvingKey is resolvingKey, for the external tests.
var ResolvingKey = resolvingKey
