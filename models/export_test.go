package models

// CacheUsage returns the entries and bytes in v's response cache, for tests.
func CacheUsage(v *Version) (entries int, bytes int64) { return v.cache.usage() }

// EntryOverhead is what the cache counts per entry beyond its key and vector.
const EntryOverhead = entryOverhead
