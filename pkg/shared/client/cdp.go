package client

// HeaderLeaseID carries the agent lease a websocket route acts under
// (botd's GET /screens/{id}/cdp), where a JSON body cannot.
const HeaderLeaseID = "X-Lease-Id"
