package steps

import "github.com/takoform/queuehost/features/hostapi"

// The kit's Host API client and Operation checks live in features/hostapi,
// which the host's own tests build on too (internal/apiclient); the steps
// name them as before.
type (
	Client       = hostapi.Client
	Response     = hostapi.Response
	Problem      = hostapi.Problem
	ProblemError = hostapi.ProblemError
	Operation    = hostapi.Operation
)

var (
	CheckProblem      = hostapi.CheckProblem
	AcceptedOperation = hostapi.AcceptedOperation
	GetOperation      = hostapi.GetOperation
	WaitOperation     = hostapi.WaitOperation
	Str               = hostapi.Str
	ProblemErrors     = hostapi.ProblemErrors
)
