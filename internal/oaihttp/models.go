package oaihttp

import (
	"encoding/json"
	"net/http"
	"slices"
	"time"
)

// Model is a model object of GET /v1/models and GET /v1/models/{model}.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"` // "model"
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// ownedBy is every model's owned_by.
const ownedBy = "leasehold"

// ServeModels answers GET /v1/models with ids (the models the caller may
// use, in order) when id is "", else GET /v1/models/{id}: the model when
// ids has it, else 404 model_not_found, the same answer for a model that
// does not exist and one the caller may not use, as the list shows
// neither. created is every model's creation time.
func ServeModels(w http.ResponseWriter, id string, ids []string, created time.Time) {
	model := func(id string) Model {
		return Model{ID: id, Object: "model", Created: created.Unix(), OwnedBy: ownedBy}
	}
	var body any
	switch {
	case id == "":
		data := make([]Model, 0, len(ids))
		for _, id := range ids {
			data = append(data, model(id))
		}
		body = map[string]any{"object": "list", "data": data}
	case slices.Contains(ids, id):
		body = model(id)
	default:
		WriteError(w, Error{Status: http.StatusNotFound, Type: "not_found_error", Code: "model_not_found", Param: "model",
			Message: "The model `" + id + "` does not exist or you do not have access to it (GET /v1/models lists yours)."})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}
