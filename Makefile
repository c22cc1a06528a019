# sandfs build and test entry points. See README.md.
GO      ?= go
export CGO_ENABLED := 0

.PHONY: build test test-unit run clean
build:
	$(GO) build -o bin/sandfs ./tools/sandfs

test-unit:
	$(GO) test -race ./...

clean:
	rm -rf bin build
