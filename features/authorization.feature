@HostAPI-v2 @authorization
Feature: Authorisation
  Every route needs a token; roles are per space and may be narrowed to
  Forms; a reference grants no permission; changing the code that consumes
  a queue needs editor on the queue; producer Binding calls are authorised
  at call time for the version's creator and for the principal whose
  request invoked the worker.

  Background:
    Given a queue "q"
    And a worker "w"

  @HAPI-AUTH-2
  Scenario: no token or an unknown token is unauthenticated
    When I act without a token
    And I GET "/v2/spaces/{{space}}/resources"
    Then the request is refused with 401 "unauthenticated"
    When I act with an unknown token
    And I GET "/v2/spaces/{{space}}/resources/{{uid:q}}"
    Then the request is refused with 401 "unauthenticated"

  @needs-viewer @HAPI-AUTH-4
  Scenario: a viewer reads but cannot create, update, delete or invoke
    When I act as the "viewer" principal
    And I read "q"
    Then the response status is 200
    When I create a queue "q2" with spec {"messageRetentionSeconds": 60}
    Then the request is refused with 403 "forbidden"
    When I update "q" with messageRetentionSeconds=120
    Then the request is refused with 403 "forbidden"
    When I delete "q"
    Then the request is refused with 403 "forbidden"
    When I invoke the fetch handler of "w"
    Then the request is refused with 403 "forbidden"
    And "q" still exists

  @needs-other @HAPI-AUTH-3
  Scenario: a principal without any grant in the space is told nothing exists there
    When I act as the "other" principal
    And I read "q"
    Then the request is refused with 404 "not_found"
    When I GET "/v2/spaces/{{space}}/resources"
    Then the request is refused with 404 "not_found"
    When I create a queue "q2" with spec {"messageRetentionSeconds": 60}
    Then the request is refused with 404 "not_found"

  @QueueConsumer-0.3.0 @QC-DELIV-5 @QC-OWN-9 @QC-CRUD-1 @QC-CRUD-2 @Q-REF-6 @HAPI-AUTH-6
  @needs-narrow
  Scenario: a reference grants no permission: an editor of consumers who cannot read queues is forbidden
    When I act as the "narrow" principal
    And I create a consumer "c" of "q" by "w"
    Then the request is refused with 403 "forbidden"
    And the problem points at "/spec/queue"
    And the listing holds exactly 0 resources named "c"

  @AtLeastOnceQueue-0.2.0 @WorkerVersion-0.5.0 @Q-REF-6 @HAPI-AUTH-6
  @needs-narrow
  Scenario: a reference grants no permission: an editor of versions who cannot read queues cannot bind one
    When I act as the "narrow" principal
    And I create a version "w-nb" of "w" with:
      """
      {"queueProducerBindings": [{"name": "TASKS", "resource": {"resourceUid": "{{uid:q}}"}}]}
      """
    Then the request is refused with 403 "forbidden"
    And the problem points at "/spec/queueProducerBindings/0/resource/resourceUid"
    And the listing holds exactly 0 resources named "w-nb"

  @needs-narrow @HAPI-AUTH-4 @HAPI-AUTH-5
  Scenario: a principal narrowed to some Forms cannot read the others, and lists only what it may read
    When I act as the "narrow" principal
    And I read "q"
    Then the request is refused with 403 "forbidden"
    When I list the resources
    Then the response status is 200
    And the listing shows no "AtLeastOnceQueue" resources

  @AtLeastOnceQueue-0.2.0 @producer-binding @Q-MSG-11 @Q-REF-4 @Q-REF-6 @Q-BIND-13 @HAPI-AUTH-8
  @needs-sender
  Scenario: producer calls are authorised at call time for the principal the version runs as
    When I act as the "sender" principal
    And I create an "ModuleWorker" named "pw" with spec:
      """
      {"handlers": ["fetch"]}
      """
    Then the request is accepted
    When I create a version "pw-v1" of "pw" with:
      """
      {"queueProducerBindings": [{"name": "TASKS", "resource": {"resourceUid": "{{uid:q}}"}}]}
      """
    Then the request is accepted
    When I replace the spec of "pw" with:
      """
      {"handlers": ["fetch"], "version": {"resourceUid": "{{uid:pw-v1}}"}}
      """
    Then the request is accepted
    When "pw" calls "TASKS" with:
      """
      {"op": "send", "body": {"string": "{\"tag\":\"x\"}"}}
      """
    Then the call rejects with "backend_unavailable"

  @QueueConsumer-0.3.0 @WorkerVersion-0.5.0 @ModuleWorker-0.3.0 @HAPI-AUTH-7
  @needs-sender
  Scenario: changing the code behind an attached consumer needs editor on the queues it consumes
    Given a consumer "c" of "q" by "w"
    And an unselected version "w-v2" of "w" with producer binding TASKS to "q"
    When I act as the "sender" principal
    And I create a version "w-v3" of "w" with:
      """
      {}
      """
    Then the request is refused with 403 "forbidden"
    And the problem points at "/spec/worker/resourceUid"
    And the listing holds exactly 0 resources named "w-v3"
    When I replace the spec of "w" with:
      """
      {"handlers": ["fetch", "queue"], "version": {"resourceUid": "{{uid:w-v2}}"}}
      """
    Then the request is refused with 403 "forbidden"
    And the problem points at "/spec/version/resourceUid"
    And the spec of "w" reads {"handlers": ["fetch", "queue"], "version": {"resourceUid": "{{uid:w-v1}}"}}

  @AtLeastOnceQueue-0.2.0 @producer-binding @Q-BIND-13 @HAPI-AUTH-8
  @needs-sender
  Scenario: a producer call needs the rights of the principal that invoked the worker, not only its creator's
    Given a worker "pw" with producer binding TASKS to "q"
    When I act as the "sender" principal
    And I make "pw" call "TASKS" with:
      """
      {"op": "send", "body": {"string": "{\"tag\":\"inv-1\"}"}}
      """
    Then the call rejects with "backend_unavailable"
    When I act as the "admin" principal
    And I make "pw" call "TASKS" with:
      """
      {"op": "send", "body": {"string": "{\"tag\":\"inv-2\"}"}}
      """
    Then the call resolves with 1 message ID
