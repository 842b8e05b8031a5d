package runtime

// DirectDeletes is how many sandboxes were removed by deleteExited.
func (r *Runtime) DirectDeletes() int64 { return r.directDeletes.Load() }
