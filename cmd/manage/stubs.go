package main

import "github.com/spf13/cobra"

func upCmd() *cobra.Command    { return &cobra.Command{Use: "up"} }
func nodeCmd() *cobra.Command  { return &cobra.Command{Use: "node"} }
func benchCmd() *cobra.Command { return &cobra.Command{Use: "bench"} }
