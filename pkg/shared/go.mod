module github.com/open-bot/computer/pkg/shared

go 1.26
