package styx

// DefaultRedriveRate is the rate, in items per second, at which the CLI
// (`styx dead redrive --rate`) and the console's redrive dialog start a
// redrive unless the user chooses another or no limit (issue 49, safer
// redrives): 100 items a second, 6,000 a minute, drains a typical incident's
// dead-letter queue in minutes while a consumer fleet that was failing
// sees its traffic grow gradually instead of all at once. The API's own
// default stays unthrottled (DeadRedriveRequest.rate_limit 0: the wire
// contract); a client that wants the safe default sends it.
const DefaultRedriveRate = 100
