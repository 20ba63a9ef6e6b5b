//go:build !unix

package main

// main is never run in a reactor module; init registers the handler.
func main() {}
