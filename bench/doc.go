// Package bench will measure servers: open-loop load, HdrHistogram statistics and reports.
// It arrives with the `server bench` issue; until then `server bench` exits 2 and says so.
package bench
