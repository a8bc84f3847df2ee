// Command testsummary is the README's test command: it runs
// `go test -json` (by default `go test -race -json ./...`; any arguments
// replace `-race ./...`), prints what plain `go test` would print (each
// package's ok or FAIL line, and the output of failing tests only), and
// ends with a summary: every package tested with its result, every
// skipped test with its skip message (which names the command that
// enables it), and last a line CI's runner reads,
//
//	tests: 812 passed, 0 failed, 11 skipped
//
// counting every test and subtest once. It exits with go test's own exit
// status. It imports no Switchyard package.
//
//	go run ./internal/testsummary                  # the whole suite, race detector on
//	go run ./internal/testsummary -count=1 ./pools/ # one package
package main
