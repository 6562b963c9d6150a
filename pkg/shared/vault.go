package shared

// CodeSecretFieldRefused: type_secret refused the focused field because it
// would show the secret (not a masked password field) and the secret was
// not stored with visible: true. Nothing was typed.
const CodeSecretFieldRefused Code = "secret_field_refused"
