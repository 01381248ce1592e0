@HostAPI-v2 @operations
Feature: Resource CRUD through Operations

  @QC-CRUD-3 @Q-OPS-1 @Q-OPS-5 @Q-INTRO-4 @Q-INTRO-5 @QC-INTRO-3 @HAPI-OPS-1 @HAPI-OPS-2 @HAPI-RES-2
  Scenario: create answers 202 with an Operation and a Location that long-polls to succeeded
    When I create a queue "q" with spec {"messageRetentionSeconds": 60}
    Then the request is accepted
    And I remember the operation
    And the remembered operation reads succeeded
    And "q" exists
    And "q" is at generation 1

  @Q-OPS-2 @QC-CRUD-2 @HAPI-RES-3 @HAPI-ADM-3
  Scenario: a name already used in the space is name_conflict, before any side effect
    Given a queue "q"
    When I create a queue "q" with spec {"messageRetentionSeconds": 120}
    Then the request is refused with 409 "name_conflict"
    And the listing holds exactly 1 resource named "q"

  @QueueConsumer-0.3.0 @AtLeastOnceQueue-0.2.0 @idempotency @QC-CRUD-18 @Q-OPS-19 @HAPI-IDEM-4
  Scenario: the same Idempotency-Key and body return the same Operation and create one resource
    Given the next request carries header "Idempotency-Key": kit-key-1
    When I create a queue "q" with spec {"messageRetentionSeconds": 60}
    Then the request is accepted
    Given the next request carries header "Idempotency-Key": kit-key-1
    When I create a queue "q" with spec {"messageRetentionSeconds": 60}
    Then the response replays the previous operation
    And the listing holds exactly 1 resource named "q"

  @idempotency @QC-CRUD-18 @HAPI-IDEM-1
  Scenario: the structured-field string form of a key is the same key
    Given the next request carries header "Idempotency-Key": "kit-key-2"
    When I create a queue "q" with spec {"messageRetentionSeconds": 60}
    Then the request is accepted
    Given the next request carries header "Idempotency-Key": kit-key-2
    When I create a queue "q" with spec {"messageRetentionSeconds": 60}
    Then the response replays the previous operation

  @idempotency @QC-CRUD-18 @HAPI-IDEM-5 @HAPI-IDEM-3
  Scenario: the same key with another body is idempotency_key_reuse
    Given the next request carries header "Idempotency-Key": kit-key-3
    When I create a queue "q" with spec {"messageRetentionSeconds": 60}
    Then the request is accepted
    Given the next request carries header "Idempotency-Key": kit-key-3
    When I create a queue "q" with spec {"messageRetentionSeconds": 61}
    Then the request is refused with 422 "idempotency_key_reuse"

  @idempotency @HAPI-IDEM-6
  Scenario: a request refused in admission stores no key, so a corrected retry is accepted
    Given the next request carries header "Idempotency-Key": kit-key-4
    When I create a queue "q" with spec {"messageRetentionSeconds": 59}
    Then the request is refused with 422 "invalid_spec"
    Given the next request carries header "Idempotency-Key": kit-key-4
    When I create a queue "q" with spec {"messageRetentionSeconds": 60}
    Then the request is accepted

  @idempotency @HAPI-IDEM-1
  Scenario: an Idempotency-Key longer than 255 characters is invalid_request
    Given the next request carries header "Idempotency-Key": kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk
    When I create a queue "q" with spec {"messageRetentionSeconds": 60}
    Then the request is refused with 400 "invalid_request"

  @QueueConsumer-0.3.0 @idempotency @QC-CRUD-18 @HAPI-IDEM-4 @HAPI-RES-2
  Scenario: an update retried with its key replays the same Operation
    Given a queue "q"
    And a worker "w"
    And a consumer "c" of "q" by "w"
    And the next request carries header "Idempotency-Key": kit-key-5
    When I update "c" with maxRetries=5
    Then the request is accepted
    Given the next request carries header "Idempotency-Key": kit-key-5
    When I update "c" with maxRetries=5
    Then the response replays the previous operation
    And "c" is at generation 2

  @if-match @HAPI-RES-2
  Scenario: If-Match with a stale etag is precondition_failed; with the current one the update applies
    Given a queue "q"
    And I remember the etag of "q"
    And "q" has been updated with messageRetentionSeconds=120
    And the next request carries header "If-Match": {{etag:q}}
    When I update "q" with messageRetentionSeconds=180
    Then the request is refused with 412 "precondition_failed"
    Given I remember the etag of "q"
    And the next request carries header "If-Match": {{etag:q}}
    When I update "q" with messageRetentionSeconds=180
    Then the request is accepted
    And the next request carries header "If-Match": {{etag:q}}
    When I delete "q"
    Then the request is refused with 412 "precondition_failed"

  @QueueConsumer-0.3.0 @operation-in-progress @QC-CRUD-11 @QC-CRUD-24 @QC-CRUD-21 @HAPI-OPS-6
  Scenario: while a consumer's deletion waits for its running handler, another Operation on it is operation_in_progress
    Given a queue "q"
    And a worker "w" with producer binding TASKS to "q"
    And a consumer "c" of "q" by "w"
    And "w" sends {"tag":"slow","do":"sleep-ack:4000"} through "TASKS"
    And message "slow" is delivered
    When I start deleting "c"
    And I update "c" with maxRetries=1
    Then the request is refused with 409 "operation_in_progress"
    And the deletion of "c" completes
    And "c" no longer exists
    And message "slow" is not delivered again within 2 seconds

  @Q-OPS-7 @HAPI-RES-4
  Scenario: a deleted resource answers 404 not_found
    Given a queue "q"
    And "q" has been deleted
    When I read "q"
    Then the request is refused with 404 "not_found"

  @needs-sender @idempotency @HAPI-IDEM-2
  Scenario: an Idempotency-Key is scoped to its principal: another principal's request with the same key is not a replay
    Given the next request carries header "Idempotency-Key": kit-scope-1
    When I POST "/v2/spaces/{{space}}/resources" with body:
      """
      {"name": "mw", "formUrl": "https://edge.forms.takoform.com/forms/ModuleWorker/0.3.0/", "spec": {"handlers": ["fetch"]}}
      """
    Then the response status is 202
    When I act as the "sender" principal
    And the next request carries header "Idempotency-Key": kit-scope-1
    And I POST "/v2/spaces/{{space}}/resources" with body:
      """
      {"name": "mw", "formUrl": "https://edge.forms.takoform.com/forms/ModuleWorker/0.3.0/", "spec": {"handlers": ["fetch"]}}
      """
    Then the request is refused with 409 "name_conflict"

  @idempotency @HAPI-IDEM-2
  Scenario: an Idempotency-Key is scoped to its space, method and path
    Given the next request carries header "Idempotency-Key": kit-scope-2
    When I POST "/v2/spaces/{{space}}/resources" with body:
      """
      {"name": "q", "formUrl": "https://edge.forms.takoform.com/forms/AtLeastOnceQueue/0.2.0/", "spec": {"messageRetentionSeconds": 60}}
      """
    Then the response status is 202
    Given the next request carries header "Idempotency-Key": kit-scope-2
    When I POST "/v2/spaces/{{space2}}/resources" with body:
      """
      {"name": "q", "formUrl": "https://edge.forms.takoform.com/forms/AtLeastOnceQueue/0.2.0/", "spec": {"messageRetentionSeconds": 60}}
      """
    Then the response status is 202
    And the response is a new operation, not a replay of the previous one
    Given a queue "p"
    And the next request carries header "Idempotency-Key": kit-scope-3
    When I update "p" with messageRetentionSeconds=120
    Then the request is accepted
    Given a queue "r"
    And the next request carries header "Idempotency-Key": kit-scope-3
    When I update "r" with messageRetentionSeconds=120
    Then the request is accepted
    And the response is a new operation, not a replay of the previous one
    And "r" is at generation 2
    Given the next request carries header "Idempotency-Key": kit-scope-3
    When I delete "r"
    Then the request is accepted
    And the response is a new operation, not a replay of the previous one
    And "r" no longer exists

  @idempotency @HAPI-IDEM-3
  Scenario: the fingerprint is of the canonical JSON: member order and white space do not change it, a value does
    Given the next request carries header "Idempotency-Key": kit-fp-1
    When I POST "/v2/spaces/{{space}}/resources" with body:
      """
      {"name": "q", "formUrl": "https://edge.forms.takoform.com/forms/AtLeastOnceQueue/0.2.0/", "spec": {"messageRetentionSeconds": 60, "deliveryDelaySeconds": 0}}
      """
    Then the response status is 202
    Given the next request carries header "Idempotency-Key": kit-fp-1
    When I POST "/v2/spaces/{{space}}/resources" with body:
      """
      { "spec" : { "deliveryDelaySeconds" : 0 , "messageRetentionSeconds" : 60 },
        "formUrl" : "https://edge.forms.takoform.com/forms/AtLeastOnceQueue/0.2.0/", "name" : "q" }
      """
    Then the response replays the previous operation
    Given the next request carries header "Idempotency-Key": kit-fp-1
    When I POST "/v2/spaces/{{space}}/resources" with body:
      """
      {"name": "q", "formUrl": "https://edge.forms.takoform.com/forms/AtLeastOnceQueue/0.2.0/", "spec": {"messageRetentionSeconds": 60, "deliveryDelaySeconds": 1}}
      """
    Then the request is refused with 422 "idempotency_key_reuse"
    Given the next request carries header "Idempotency-Key": kit-fp-1
    When I POST "/v2/spaces/{{space}}/resources" with body:
      """
      {"name": "q", "formUrl": "https://edge.forms.takoform.com/forms/AtLeastOnceQueue/0.2.0/", "offering": "embedded", "spec": {"messageRetentionSeconds": 60, "deliveryDelaySeconds": 0}}
      """
    Then the request is refused with 422 "idempotency_key_reuse"

  @idempotency @HAPI-ADM-4 @HAPI-IDEM-4
  Scenario: a replay returns its Operation even after the resource was deleted
    Given the next request carries header "Idempotency-Key": kit-after-delete
    When I create a queue "q" with spec {"messageRetentionSeconds": 60}
    Then the request is accepted
    And I remember the operation
    Given "q" has been deleted
    And the next request carries header "Idempotency-Key": kit-after-delete
    When I create a queue "q" with spec {"messageRetentionSeconds": 60}
    Then the response status is 202
    And the response replays the remembered operation
    And "q" no longer exists

  @needs-other @HAPI-OPS-7
  Scenario: an Operation is read only through its own space's path
    When I create a queue "q" with spec {"messageRetentionSeconds": 60}
    Then the request is accepted
    And I remember the operation
    When I read the remembered operation through the path of this space "{{space}}"
    Then the response status is 200
    When I read the remembered operation through the path of another space "{{space2}}"
    Then the request is refused with 404 "not_found"
    When I act as the "other" principal
    And I read the remembered operation through the path of this space "{{space}}"
    Then the request is refused with 404 "not_found"

  @HAPI-OPS-4
  Scenario: the Operations of a resource are listed newest first, a page at a time, and filtered by state
    Given a queue "q"
    And "q" has been updated with messageRetentionSeconds=120
    And "q" has been updated with messageRetentionSeconds=180
    Then listing the operations on "q" 1 at a time yields 3 operations, newest first, the last a create
    And listing the operations on "q" 200 at a time yields 3 operations, newest first, the last a create
    And listing the operations of the space with state "succeeded" yields only succeeded operations, 3 or more
    And listing the operations of the space with state "failed" yields only failed operations, 0 or more

  @needs-narrow @HAPI-OPS-5
  Scenario: Operations on a Form the principal may not read are left out of the list
    Given a queue "q"
    And a worker "w"
    When I act as the "narrow" principal
    Then listing the operations of the space shows none on "q" and some on "w"

  @idempotency @HAPI-ADM-4 @HAPI-IDEM-4
  Scenario: PUT and DELETE replays return their Operation after the resource changed
    Given a queue "q"
    And I remember the etag of "q"
    And the next request carries header "Idempotency-Key": kit-put-1
    And the next request carries header "If-Match": {{etag:q}}
    When I update "q" with messageRetentionSeconds=120
    Then the request is accepted
    Given the next request carries header "Idempotency-Key": kit-put-1
    And the next request carries header "If-Match": "1-stale"
    When I update "q" with messageRetentionSeconds=120
    Then the response replays the previous operation
    And "q" is at generation 2
    Given the next request carries header "Idempotency-Key": kit-del-1
    When I delete "q"
    Then the request is accepted
    Given the next request carries header "Idempotency-Key": kit-del-1
    When I delete "q"
    Then the response replays the previous operation

  @idempotency @HAPI-IDEM-1
  Scenario Outline: a malformed Idempotency-Key is invalid_request and creates nothing
    Given the next request carries header "Idempotency-Key": <key>
    When I create a queue "q" with spec {"messageRetentionSeconds": 60}
    Then the request is refused with 400 "invalid_request"
    And the listing holds exactly 0 resources named "q"

    Examples:
      | key            |
      | has space      |
      | "unterminated  |
      | "bad\escape"   |
      | ké             |
