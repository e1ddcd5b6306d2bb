"""The ground floor: errors, the clock, typed records, statistics and the small helpers every floor uses."""
