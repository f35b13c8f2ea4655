module github.com/oncegate/oncegate

go 1.26

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-json-experiment/json v1.27.2 // indirect
	github.com/gowebpki/jcs v1.0.2 // indirect
	github.com/maypok86/otter/v2 v2.4.0 // indirect
	github.com/puzpuzpuz/xsync/v4 v4.5.0 // indirect
)
